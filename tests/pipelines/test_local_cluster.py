"""`make run`'s local head keeps its token to its owner: written 0600 from the first byte."""

import os
import stat

from pipelines.cli.local_cluster import write_private


def test_the_token_is_never_readable_by_others(tmp_path):
    old = os.umask(0)  # the most permissive umask: the mode must come from the code, not from it
    try:
        fresh = tmp_path / "token"
        write_private(fresh, "secret")
        stale = tmp_path / "state.json"
        stale.write_text("an earlier head's state")
        stale.chmod(0o644)
        write_private(stale, "new state")
    finally:
        os.umask(old)
    for path, text in [(fresh, "secret"), (stale, "new state")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == text
