"""The study's write-up (``studies/published_model/RESULTS.md``): this project's training points beside the
published runs, the scaling model fed by them, the whole-step model against every published point, and the
model's prediction for each cluster of the harness's records."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.analysis.efficiency import with_efficiency
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.records import RECORDS_DIR, by_kind
from hpc_imagenet.harness.report.common import Environments
from studies.common.overlap import OVERLAP_RECORDS
from studies.published_model import (HERE, REFERENCE, cluster_section, load_reference, published_section,
                                     whole_step_section)
from studies.published_model.model_section import model_section
from studies.published_model import words

RECORDS = (RECORDS_DIR, OVERLAP_RECORDS)  # the harness's records, and the overlap bench's (the hidden fraction)


def build(record_paths: Sequence[Path] = RECORDS, out_dir: Path = HERE, ref_dir: Path = REFERENCE) -> Path:
    """Write OUT_DIR/RESULTS.md and its figures."""
    loaded = records.load_by_file(record_paths)  # read once: the whole, and each cluster's (tag's) file
    recs = with_efficiency([r for _, good, _ in loaded for r in good if r.counted()])
    pub, links = load_reference(ref_dir)
    train, ar, overlap = by_kind(recs, "train"), by_kind(recs, "allreduce"), by_kind(recs, "overlap")
    env, fig_dir = Environments(), out_dir / "figures"
    tags = {f.stem: [r for r in good if r.counted()] for f, good, _ in loaded if f.parent == RECORDS_DIR}
    body = [published_section.throughput_section(train, pub, env, fig_dir),
            published_section.time_section(train, pub, env, fig_dir),
            published_section.multinode_section(train, env),
            model_section(train, ar, overlap, pub, links, env, fig_dir),
            whole_step_section.section(train, by_kind(recs, "pipeline"), overlap, pub, links, fig_dir,
                                       by_kind(recs, "storage")),
            cluster_section.section(tags, fig_dir)]
    path = out_dir / "RESULTS.md"
    write_text(path, "\n".join([words("model.head"), *[b for b in body if b], "## Environments\n\n" + env.table()]))
    return path
