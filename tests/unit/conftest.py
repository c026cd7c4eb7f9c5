"""The launcher's logic (plugins/module_utils), imported as the modules import it."""

from __future__ import annotations

import sys
from pathlib import Path

# The modules import ansible.module_utils.torch_job; here the same files are plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
