"""torch's outcomes of ``tests/process_group/_store_cases.py`` on its ``HashStore``, a
``PrefixStore`` over one, a ``TCPStore`` and a ``FileStore`` (``torch_stores.json``).

Regenerate (after changing a call)::

    PYTHONPATH=/path/to/torch:. python tests/process_group/golden/make_store_golden.py
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from pathlib import Path

from tests.process_group._store_cases import outcomes

GOLDEN = Path(__file__).with_name("torch_stores.json")

if __name__ == "__main__":
    import torch.distributed as dist

    stores = {
        "HashStore": dist.HashStore(),
        "PrefixStore": dist.PrefixStore("p", dist.HashStore()),
        "TCPStore": dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=10)),
        "FileStore": dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1),
    }
    golden = {kind: outcomes(store) for kind, store in stores.items()}
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"{GOLDEN}: {sum(map(len, golden.values()))} outcomes")
