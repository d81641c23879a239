"""``tpu serve``: models behind the Open Inference Protocol (`tpu.serve`).

tpu serve MODEL... [--devices golden:4 | verilator:2 | serial:/dev/ttyUSB1,/dev/ttyUSB3]
          [--port N] [--grpc-port N] [--max-delay-ms MS] [--max-queue N] [config options]
"""

import sys


__all__ = ["add_serve_command", "cmd_serve"]


def add_serve_command(subparsers, add_config_options):
    p = subparsers.add_parser(
        "serve", help="serve models over the Open Inference Protocol (KServe v2) on a device pool",
        description="Serve MODELs (.tpu, or .onnx/.tflite compiled at start; NAME=PATH names one, "
                    "else its file's stem) over HTTP (and gRPC with --grpc-port) on the Open "
                    "Inference Protocol, on a pool of devices: golden:4, verilator:2, "
                    "serial:/dev/ttyUSB1,/dev/ttyUSB3, or groups joined by '+'. Needs the serve "
                    "extra (pip install 'tpu[serve]'). Stops on SIGINT or SIGTERM.")
    p.add_argument("models", nargs="+", metavar="MODEL", help="[NAME=]PATH of a model")
    p.add_argument("--devices", default="golden:1", metavar="SPEC",
                   help="the device pool (default golden:1)")
    p.add_argument("--port", type=int, default=8080, metavar="N", help="HTTP port (default 8080)")
    p.add_argument("--grpc-port", type=int, default=0, metavar="N",
                   help="gRPC port (default 0: no gRPC server)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="samples per chip run when compiling .onnx/.tflite models")
    p.add_argument("--max-delay-ms", type=float, default=5.0, metavar="MS",
                   help="longest a request waits for others to fill a batch (default 5)")
    p.add_argument("--max-queue", type=int, default=512, metavar="N",
                   help="requests waiting or running per model before 503 (default 512)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds a chunk may take before its device counts as hung "
                        "(default by backend: golden 60, verilator 900)")
    p.add_argument("--baud", type=int, metavar="N",
                   help="serial devices: the UART's baud rate (default 115200)")
    p.add_argument("--clock-mhz", type=float, metavar="F",
                   help="serial devices: the chip's clock in MHz (default 12)")
    add_config_options(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args):
    from ..runtime import PoolError, parse_devices
    from ..serve.server import import_kserve, parse_model_argument, serve
    from .common import CommandError
    from .model import _config
    try:
        models = dict(parse_model_argument(m) for m in args.models)
        if len(models) != len(args.models):
            raise ValueError("two models have the same name: name them NAME=PATH")
        for name, path in models.items():
            if not path.exists():
                raise ValueError(f"{path}: no such model file")
        devices = parse_devices(args.devices)
        for spec in devices:
            if spec.backend == "serial":
                if args.baud is not None:
                    spec.options["baudrate"] = args.baud
                if args.clock_mhz is not None:
                    spec.options["clock_hz"] = args.clock_mhz * 1e6
        for option in ("port", "grpc_port"):
            value = getattr(args, option)
            if not 0 <= value <= 65535 or (option == "port" and value == 0):
                raise ValueError(f"--{option.replace('_', '-')} must be a TCP port, not {value}")
        if args.max_delay_ms < 0 or args.max_queue < 1 or (args.batch is not None
                                                           and args.batch < 1):
            raise ValueError("--max-delay-ms must be >= 0, --max-queue and --batch >= 1")
        if args.timeout is not None and not args.timeout > 0:
            raise ValueError(f"--timeout must be > 0 seconds, not {args.timeout}")
        import_kserve()
    except (ValueError, ImportError) as error:
        raise CommandError(str(error)) from None

    def ready(pool):
        print(f"tpu serve: {len(pool.devices)} device(s) open ({', '.join(pool.stats)}); "
              f"models {', '.join(models)}; http://127.0.0.1:{args.port}/v2"
              + (f", gRPC port {args.grpc_port}" if args.grpc_port else ""), file=sys.stderr,
              flush=True)
    try:
        serve(models, devices, port=args.port, grpc_port=args.grpc_port, batch=args.batch,
              config=_config(args), max_delay=args.max_delay_ms / 1000,
              max_queue=args.max_queue, timeout=args.timeout, ready=ready)
    except PoolError as error:
        raise CommandError(str(error)) from None
    except ValueError as error:
        raise CommandError(str(error).splitlines()[0]) from None
    return 0
