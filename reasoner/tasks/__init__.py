"""Task families: prompt rendering, answer extraction and scoring."""
