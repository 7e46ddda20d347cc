"""Do two code trees publish the same release? ``run_release`` over the same raw days once per tree, each in a
fresh data directory with the same deployment secret and the DP noise from one seeded stream, then the published
files compared byte for byte once the run's own names are masked (release id, times, ledger id; ``privacy.json``
without them) and the ledger charges field by field (all but their ids, run ids and times).

    python -m benchmarks.same_release --raw RAW --tree BASE --tree . --out OUT [--budget JSON] [--seed 7]

TEST HOOKS, in the measured child only, never in a release: ``SecureBits`` (the OS CSPRNG) is replaced by
``SeededBits(seed)`` for the noise, and returns the rows' own order where the private stages shuffle rows (their
CSPRNG row order is what differs between two correct runs; the release does not depend on it). Runs in process
(``OPAL_DP_WORKERS=1``) so the hooks reach every draw. Each child imports ``opal_dp`` from its tree; this file is
run as a script so that a tree without it can be compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

VOLATILE = ("id", "_at", "time", "run", "created", "generated", "release_id", "ledger")
RUN_NAMES = re.compile(rb"\d{8}T\d{6}Z-[0-9a-f]{8}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00|\b[0-9a-f]{32}\b")


def _stable(value):
    """``privacy.json`` without the values that name this run (ids, times, the ledger's own id)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not any(part in k.lower() for part in VOLATILE)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def child(tree: Path, data_dir: Path, out: Path, seed: int, budget: dict) -> None:
    import numpy as np

    from opal_dp.core import bits

    stream = bits.SeededBits(seed)

    def words(self, n):  # TEST HOOK (see the module docstring)
        if sys._getframe(1).f_globals.get("__name__", "").startswith("opal_dp.prep"):
            return np.arange(bits._check_count(n), dtype=np.uint64)
        return stream.words(n)

    bits.SecureBits.words = words
    import dagster as dg

    from opal_dp.cli import run_release
    from opal_dp.defs.shared.budget import PrivacyBudget
    from opal_dp.defs.shared.storage import OpalStorage
    from opal_dp.permissions import create_file, make_dirs

    storage = OpalStorage(data_dir=str(data_dir))
    make_dirs(Path(storage.secret_file).parent)
    fd = create_file(Path(storage.secret_file))
    os.write(fd, hashlib.sha256(b"same_release secret").digest())
    os.close(fd)
    with dg.DagsterInstance.ephemeral() as instance:
        run_release(instance, data_dir=str(data_dir), budget=budget or None)
    latest = Path(storage.published_dir) / "latest"
    files = {}
    for path in sorted(p for p in latest.rglob("*") if p.is_file()):
        name = str(path.relative_to(latest))
        if name == "privacy.json":
            files[name] = _stable(json.loads(path.read_text()))
        else:
            files[name] = hashlib.sha256(RUN_NAMES.sub(b"*", path.read_bytes())).hexdigest()
    charges = sorted([c.unit, c.scope, c.marginal, c.relation, c.measure, c.epsilon, c.rho, c.delta, c.mechanism,
                      c.bounds, c.first_date, c.last_date, c.input_version]
                     for c in PrivacyBudget(**budget).ledger(storage).charges())
    out.write_text(json.dumps({"tree": str(tree), "files": files, "charges": charges}, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.same_release", description=__doc__.split("\n")[0])
    parser.add_argument("--raw", type=Path, required=True, help="folder of raw day files")
    parser.add_argument("--tree", type=Path, action="append", required=True, help="code tree (give two)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", default="{}", help="privacy_budget configuration as JSON (default: the "
                        "deployment default)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if len(args.tree) != 2:
        parser.error("give exactly two --tree")
    results = []
    for i, tree in enumerate(args.tree):
        data = args.out / f"tree{i}" / "data"
        data.mkdir(parents=True)
        (data / "raw").symlink_to(args.raw.resolve(), target_is_directory=True)
        result = args.out / f"tree{i}.json"
        env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "OPAL_DP_WORKERS": "1",
               "OPAL_DP_DATA_DIR": str(data)}
        with open(args.out / f"tree{i}.log", "wb") as log:
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "child", str(tree.resolve()), str(data),
                            str(result), str(args.seed), args.budget], env=env, cwd=tree.resolve(), stdout=log,
                           stderr=subprocess.STDOUT, check=True)
        results.append(json.loads(result.read_text()))
    a, b = results
    same_files = a["files"] == b["files"]
    same_charges = a["charges"] == b["charges"]
    print(f"published files: {len(a['files'])} vs {len(b['files'])}, identical: {same_files}")
    for name in sorted(set(a["files"]) | set(b["files"])):
        if a["files"].get(name) != b["files"].get(name):
            print(f"  differs: {name}")
    print(f"ledger charges: {len(a['charges'])} vs {len(b['charges'])}, identical: {same_charges}")
    return 0 if same_files and same_charges else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6]))
    else:
        sys.exit(main())
