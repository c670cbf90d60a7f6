"""Logic programs, hypergraph A* (host reference and jitted kernel), heuristics, traces and A* rewards."""
