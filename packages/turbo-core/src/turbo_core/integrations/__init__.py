"""turbo inside other libraries' models: one call swaps a model's layers for turbo's.

One module per library, each importing that library only when it is imported itself (importing
``turbo_core`` or this package imports none of them):

* :mod:`turbo_core.integrations.transformers`: Hugging Face Transformers models
  (``apply_turbo(model)``, ``AutoTurboModelForCausalLM``); needs ``turbo-core[hf]``.
"""
