"""Print pip's configured package sources (`pip config list`: find-links, index-url,
extra-index-url) as uv arguments: uv does not read pip's configuration, and on a machine whose
torch CPU wheel lies in a local find-links folder it would otherwise fetch the CUDA build."""

import shlex
import subprocess
import sys

FLAGS = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url"}


def main() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    args: list[str] = []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        flag = FLAGS.get(key.rpartition(".")[2])
        if flag:
            for source in shlex.split(value)[0].split() if value else []:
                if [flag, source] != args[-2:] and source not in args:
                    args += [flag, source]
    print(shlex.join(args))


if __name__ == "__main__":
    main()
