"""Launchers: one function per primitive that the autograd layer calls.

Each primitive is also a ``torch.library.custom_op`` (namespace ``turbo``) with a fake
implementation, so ``torch.compile(fullgraph=True)`` sees an opaque op with known output shapes and
the backend is chosen at run time. In eager mode the launcher calls the dispatcher directly and
skips the custom-op overhead.
"""
