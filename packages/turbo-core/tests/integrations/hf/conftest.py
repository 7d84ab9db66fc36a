"""The Hugging Face integration's tests need transformers 5 (``turbo-core[hf]``).

In the ``integrations-hf`` nox session (``TURBO_HF_TESTS=1``) a missing transformers is an error:
the session fails instead of skipping everything. Elsewhere (the core session, which does not
install it) each test module skips itself with the reason (``pytest.importorskip``).
"""

import importlib.util
import os

if os.environ.get("TURBO_HF_TESTS") == "1" and importlib.util.find_spec("transformers") is None:
    raise ImportError("TURBO_HF_TESTS=1: the Hugging Face integration's tests need transformers "
                      "(pip install turbo-core[hf])")
