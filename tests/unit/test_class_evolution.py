"""A deploy reads what the last deploy's classes wrote, as its classes are now
(docs/durability.md, "What a deploy may change").

The first deploy runs in a process of its own (its module ``v1``) and writes
keyed state (the short-term memory and queued records the Flink driver keeps)
and a journaled call's outcome; the next deploy (this process, module ``v2``
under the same name) restores them through the paths the runtime reads them
by: ``KeyState.from_json`` (the Flink driver's restore), short-term memory as
an action's ``ctx.short_term_memory.get`` sees it, and ``decode_outcome`` (a
replayed call).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Dict

import pytest

from flink_agents.runtime.durability.codec import ValueNoLongerValid
from flink_agents.runtime.durability.codec_exceptions import decode_outcome
from flink_agents.runtime.execution.memory import MemoryNode, StagedMemory
from flink_agents.runtime.execution.state import KeyState

_V1 = """
import dataclasses
from pydantic import BaseModel

class Profile(BaseModel):
    name: str
    tier: str

@dataclasses.dataclass
class Shipment:
    carrier: str
"""

_V2 = """
import dataclasses
import enum
from typing import List
from pydantic import BaseModel

class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"

class Profile(BaseModel):
    name: str
    tier: Tier                  # was str
    visits: int = 0             # new, with a default

@dataclasses.dataclass
class Shipment:
    carrier: str
    tags: List[str] = dataclasses.field(default_factory=list)   # new
"""

_V3 = """
import dataclasses
from pydantic import BaseModel

class Profile(BaseModel):
    name: str
    tier: int                   # a str like "gold" cannot follow

@dataclasses.dataclass
class Shipment:
    carrier: str
    weight_kg: float            # new, without a default
"""

_WRITE = """
import json, sys
from flink_agents.runtime.durability.codec import encode
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.runtime.durability.codec_exceptions import encode_outcome
from flink_agents.runtime.execution.state import KeyState, PendingRecord
import {module} as v1
trust_package("{module}")
state = KeyState(journal_id="job", short_term_memory={{
    "profile": encode(v1.Profile(name="ada", tier="gold")),
    "shipment": encode(v1.Shipment(carrier="DHL")),
}}, pending=[PendingRecord(0, v1.Profile(name="bo", tier="silver"))])
print(json.dumps({{"state": state.to_json(), "outcome": encode_outcome(v1.Shipment(carrier="UPS"), call="c")}}))
"""


def _deploy(tmp_path: Path, module: str, source: str) -> Any:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    sys.modules.pop(module, None)
    from flink_agents.runtime.durability import codec_classes

    codec_classes.trust_package(module)
    return importlib.import_module(module)


@pytest.fixture
def written_by_v1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Dict[str, str]]:
    module = f"evolving_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(_V1))
    done = subprocess.run(
        [sys.executable, "-c", _WRITE.format(module=module)], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[2]}"}, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module, json.loads(done.stdout)
    sys.modules.pop(module, None)


def _memory(state: KeyState) -> MemoryNode:
    return MemoryNode(StagedMemory(state.short_term_memory, "short_term_memory"))


def test_a_restore_builds_the_current_classes_with_conversions_and_defaults(tmp_path: Path, written_by_v1) -> None:
    module, written = written_by_v1
    v2 = _deploy(tmp_path, module, _V2)

    state = KeyState.from_json(written["state"])
    profile = _memory(state).get("profile")
    shipment = _memory(state).get("shipment")
    queued = state.pending[0].value

    assert type(profile) is v2.Profile and profile.tier is v2.Tier.GOLD and profile.visits == 0
    assert type(queued) is v2.Profile and queued.tier is v2.Tier.SILVER
    assert type(shipment) is v2.Shipment and shipment.carrier == "DHL" and shipment.tags == []
    replayed = decode_outcome(written["outcome"])  # a journaled result reads back the same way
    assert type(replayed) is v2.Shipment and replayed.tags == []


def test_a_change_the_stored_values_cannot_follow_fails_naming_path_and_class(tmp_path: Path, written_by_v1) -> None:
    module, written = written_by_v1
    _deploy(tmp_path, module, _V3)
    memory = _memory(KeyState.from_json(json.dumps({**json.loads(written["state"]), "pending": []})))

    with pytest.raises(ValueNoLongerValid, match=rf"short_term_memory\.profile: a stored {module}\.Profile does "
                                                 r"not validate .*tier: Input should be a valid integer"):
        memory.get("profile")
    with pytest.raises(ValueNoLongerValid, match=rf"short_term_memory\.shipment: a stored {module}\.Shipment has "
                                                 r"no field 'weight_kg'.*without a default"):
        memory.get("shipment")
    with pytest.raises(ValueNoLongerValid, match=r"keyed state, queued record #0: .*Profile does not validate"):
        KeyState.from_json(written["state"])
