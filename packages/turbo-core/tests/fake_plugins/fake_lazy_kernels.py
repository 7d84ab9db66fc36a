"""The heavy part of fake_lazy: must be imported on first use only, never at discovery."""


PROBES = 0


def probe():
    global PROBES
    PROBES += 1
    return None


def check(args):
    return None


def gemm(args):
    a = args.a.t() if args.trans_a else args.a
    b = args.b.t() if args.trans_b else args.b
    return (a.double() @ b.double()).to(args.result_dtype)
