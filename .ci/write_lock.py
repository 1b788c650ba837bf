"""Write constraints.txt from a `pip install --dry-run --report` JSON report."""

import json
import sys
from pathlib import Path

report, out = sys.argv[1], sys.argv[2]
pins = sorted(
    (i["metadata"]["name"], i["metadata"]["version"].split("+")[0])
    for i in json.loads(Path(report).read_text())["install"]
)
with open(out, "w") as f:
    f.write("# Full lock of requirements-dev.txt (and so of requirements.txt), resolved with pip for\n")
    f.write("# CPython 3.11 on linux x86_64. Regenerate with `make lock`.\n")
    f.writelines(f"{name}=={version}\n" for name, version in pins)
