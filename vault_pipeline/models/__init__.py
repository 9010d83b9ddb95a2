"""The model seam: every model call and every embedding goes through this package.

* ``prompts``: prompt files (``Prompt``, ``load_prompt``) rendered in a jinja sandbox.
* ``protocol``: ``StructuredLLM`` (what every backend offers), ``LoggedLLM``, ``OFFLINE_MODEL``,
  ``MCP_SAMPLING``, the batch-key check ``check_one_per_key`` and the current ``deadline``.
* ``calllog``: ``CallLog`` (one redacted JSON line per call) and ``redact``.
* ``offline``: ``OfflineBackend``, deterministic algorithms, one per prompt name.
* ``litellm_backend``: ``LiteLLMBackend`` (instructor over LiteLLM in the output mode the provider
  enforces, tenacity retries, one-line failure causes), ``litellm_embed``, ``is_remote``, token
  counts and prices; the only module that imports litellm, instructor and tenacity.
* ``answers``: ``AnswerCache`` and ``CachedLLM``, a model's answers kept for a resumed ingest.
* ``estimate``: ``DryRunLLM`` and ``price_calls``, what an ingest would ask and cost.
* ``sampling``: ``SamplingLLM``, the connected MCP client's own model.
* ``workers``: ``DaemonPool`` and ``ordered``, model calls on daemon threads.
* ``build``: ``build_llm``, the backend for a model string.
* ``embed``: the embedders.
* ``threads``: ``one_blas_thread``, BLAS on one thread for the CLI's process.

Nothing is re-exported here, so importing one module never pays for another's dependencies.
"""
