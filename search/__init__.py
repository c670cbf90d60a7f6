"""Logic programs, hypergraph A* (host reference and jitted kernel), heuristics, traces and A* rewards.

Host-side API (paper: ../shared/papers/astar_post_training.txt, §2, §3, §4.1, appendix A):

* search.logic: Atom(predicate, args), Rule(premises, conclusion, name), Program(axioms, rules), LogicError.
* search.ground: validate_program, check_goal / in_herbrand_base, minimal_model (semi-naive fixpoint of Eq. 1).
* search.hypergraph: compile_program(program) -> Hypergraph in the canonical atom / hyperedge order.
* search.heuristics: inside_weights, heuristic_values(hg, goal_id, heuristic="zero"|"dependency"|"true", cost=...).
* search.astar: solve(program_or_hypergraph, goal, heuristic=..., cost="max"|"sum") -> SearchResult
  (proved, weight, depth, trace of TraceStep(rule, premises, conclusion, edge), pops, pushes, v_pops, x_delta);
  shortest_depth(program, goal) -> int | None.
* search.verbalize: Verbalizer(program, dataset="proofwriter"|"deeprd"|"logic", rule_texts=None): .trace(steps),
  .context(goal); steps are separated by "\\n\\n".
* search.parse: parse_trace(text, verbalizer) -> ParsedTrace (never raises).
* search.verify: verify_steps / verify_edges -> Verdict, shortest_proof_edges, efficiency.
* search.rewards: ProblemScorer(program, goal).score_text(text, verbalizer) -> Scores (correctness, step count,
  A*-dependency and A*-true rewards, efficiency); decay_reward (Eq. 7).
"""
