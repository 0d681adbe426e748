"""``backend=vllm``: offline vLLM engines, by concern (nothing here imports vLLM at package import).

  backend   the ``VllmBackend`` class: preflight, method check, info, sessions
  settings  the settings resolved once from ``backend.options`` and the installed vLLM (frozen)
  engines   engine construction: the LRU of ``vllm.LLM`` engines, counters, shutdown
  spec      a speedbench drafter as vLLM's ``speculative_config``; the methods this vLLM runs
  session   one measured pass: static or continuous batching, per turn
  outputs   ``RequestOutput`` -> turn results: times and acceptance (per-request steps or counters)
  split     the draft/verify/accept split of a pass and its source (timers, synced pass, profiler)
  timers    the model-runner timers (a vLLM worker extension) and their rows -> step rows
  profile   the split from vLLM's profiler scopes
  stepped   prototype (``backend.options.lockstep``): a pass stepped one engine iteration at a time
"""
