"""The model seam: every model call and every embedding goes through this package.

* ``prompts``: prompt files (``Prompt``, ``load_prompt``) rendered in a jinja sandbox.
* ``protocol``: ``StructuredLLM`` (what every backend offers), ``LoggedLLM``, ``OFFLINE_MODEL``
  and the batch-key check ``check_one_per_key``.
* ``calllog``: ``CallLog`` (one redacted JSON line per call) and ``redact``.
* ``offline``: ``OfflineBackend``, deterministic algorithms, one per prompt name.
* ``litellm_backend``: ``LiteLLMBackend`` (instructor in JSON mode over LiteLLM, tenacity retries),
  ``litellm_embed`` and ``is_remote``; the only module that imports litellm, instructor and tenacity.
* ``build``: ``build_llm``, the backend for a model string.
* ``embed``: the embedders.
* ``threads``: ``one_blas_thread``, BLAS on one thread for the CLI's process.

Nothing is re-exported here, so importing one module never pays for another's dependencies.
"""
