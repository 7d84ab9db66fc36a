"""The pieces of :mod:`turbo_core.integrations.transformers` (Hugging Face Transformers 5.x), one
concern per module: ``architectures`` (what is supported, by transformers' class names),
``report`` (what a call replaced and left alone), ``attention`` / ``experts`` (the ``"turbo"``
implementations registered in transformers' attention and experts registries), ``layers`` (the
gated-MLP and router forwards), ``patch`` (``apply_turbo``) and ``auto``
(``AutoTurboModelForCausalLM``). Importing this package imports nothing; its modules import
transformers."""
