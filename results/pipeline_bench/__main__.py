"""``python -m results.pipeline_bench --root DIR``: per-core decode cost of the data backends, printed.

It measures as ``python -m results.bench pipeline`` does (:mod:`results.runners.pipeline_bench`) and
prints one line per backend and worker count instead of recording (``--json`` also writes the rows).
"""
import argparse
import json
import logging
import sys
from typing import Optional, Sequence

from imagenet.common.files import write_text
from results.runners import pipeline_bench
from results.runners.common import add_flags


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.pipeline_bench",
                                     description="images/s per core of the decoding backends")
    parser.add_argument("--root", help="ImageFolder root with train/ (default: generated ImageNet-like JPEGs)")
    add_flags(parser, images=256, image_size=224, batch_size=32, workers=[0, 2], backends=["baseline", "fast"],
              rounds=3)
    parser.add_argument("--json", help="also write the summary rows here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    samples = pipeline_bench.bench_samples(args.root, args.images)
    measured = pipeline_bench.bench(samples, args.backends, args.workers, args.image_size, args.batch_size, args.rounds)
    rows = pipeline_bench.summarize(measured)
    for r in rows:
        ratio = r["ratio_per_core"]
        print(f"{r['split']:5s} workers={r['workers']}  {r['backend']:8s} {r['images_per_cpu_s']:7.0f} img/s "
              f"per core  {r['cpu_ms_per_image']:.2f} ms CPU/img  {r['images_per_s']:7.0f} img/s wall"
              + (f"  x{ratio:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})" if ratio else ""))
    if args.json:
        write_text(args.json, json.dumps({"images": len(samples), "image_size": args.image_size,
                                          "batch_size": args.batch_size, "rows": rows}, indent=1))
    return 0



if __name__ == "__main__":
    sys.exit(main())
