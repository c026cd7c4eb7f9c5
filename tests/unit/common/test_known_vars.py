"""Which inputs the preflight refuses as lost: the known names read from the roles' argument
specs and the playbooks, the unknown ones and their closest known names, a -e split at its
spaces, table by table; and no false refusal: every name the repository itself passes or sets
(inventories, Molecule, tests, the sandbox, the Makefile, the docs) is known."""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from ansible.parsing.splitter import parse_kv
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.known_vars import (
    Known,
    data_names,
    intended,
    playbook_names,
    raw_params_line,
    read_known,
    refusal,
    spec_options,
    template_names,
    unknown_line,
)

ROOT = Path(__file__).resolve().parents[3]
KNOWN = read_known(ROOT)
PREFIXES = ("train_", "cluster_", "check_")
SMALL = Known(
    frozenset(
        {"train_max_restarts", "train_stall_timeout", "train_startup_timeout", "train_timeout"}
        | {"nproc", "job_id", "cluster_group", "cluster_port_a", "cluster_port_b"}
    ),
    PREFIXES,
)
REGEX_ARG = r"train_progress_regex=\[GPU0\] Epoch (?P<epoch>\d+) .* Loss: (?P<loss>[\d.]+)"


@pytest.mark.parametrize(
    ("text", "expression", "names"),
    [
        ("{{ nproc | default('auto') }}", False, {"nproc"}),
        ("train_check | default(false) | bool", True, {"train_check"}),
        ("{{ hostvars[host].x | default(y) }}", False, {"hostvars", "host", "y"}),
        ("{% for name in train_nodes %}{{ name }}{% endfor %}", False, {"train_nodes"}),
        ("{{ dict(a | zip(b)) }} {{ lookup('env', 'HOME') }}", False, {"a", "b"}),
        ("no template here", False, set()),
        ("{{ broken", False, set()),
    ],
)  # fmt: skip
def test_template_names_are_the_variables_a_template_reads(text, expression, names):
    assert template_names(text, expression) == names


def test_spec_options_are_every_entry_points_options():
    spec = {
        "argument_specs": {
            "main": {"options": {"cluster_group": {}, "cluster_master_port": {}}},
            "group": {"options": {"cluster_allow_root": {}}},
            "empty": {"short_description": "no options"},
        }
    }
    assert spec_options(spec) == {"cluster_group", "cluster_master_port", "cluster_allow_root"}


def test_a_playbook_knows_what_it_reads_and_sets():
    plays = [
        {
            "hosts": "{{ cluster_group | default('gpu_nodes') }}",
            "vars": {"train_job_id": "{{ job_id | default('') }}"},
            "roles": [
                {"role": "cluster", "cluster_preflight_roles": ["train"], "tags": "always"},
                {"role": "check", "when": "train_check | default(false) | bool"},
            ],
        }
    ]
    assert playbook_names(plays, PREFIXES) == {
        "cluster_group",
        "train_job_id",
        "job_id",
        "cluster_preflight_roles",
        "train_check",
    }


@pytest.mark.parametrize(
    ("given", "every_name", "unknown"),
    [
        (["train_max_restarts", "nproc"], True, []),
        (["train_max_restart"], False, ["train_max_restart"]),
        (["nprocs", "job-id"], True, ["job-id", "nprocs"]),
        # Outside the collection's own playbooks, or in an inventory: only a role's prefix.
        (["nprocs", "site_ntp_server"], False, []),
        (["ansible_user", "inventory_hostname", "groups", "omit"], True, []),
        (["__train_started", "__cluster_addresses"], True, []),
        (["_raw_params"], True, []),
        (["training_data", "trainer"], False, []),
    ],
)
def test_unknown_names(given, every_name, unknown):
    assert SMALL.unknown(given, every_name) == unknown


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("train_max_restart", ["train_max_restarts"]),
        # train_startup_timeout and train_timeout are close too, but much less.
        ("train_stall_timout", ["train_stall_timeout"]),
        ("cluster_port", ["cluster_port_a", "cluster_port_b"]),
        ("nprocs", ["nproc"]),
        ("job-id", ["job_id"]),
        ("cluster_grop", ["cluster_group"]),
        ("something_else", []),
    ],
)
def test_the_closest_known_names(name, closest):
    assert SMALL.closest(name) == closest


def test_an_unknown_line_names_the_source_and_the_suggestion():
    line = unknown_line("train_max_restart", "-e train_max_restart=3", ["train_max_restarts"])
    assert line == (
        "train_max_restart (-e train_max_restart=3): no role or playbook reads it; "
        "did you mean train_max_restarts?"
    )


def test_an_unknown_line_without_a_close_name_points_to_the_reference():
    line = unknown_line("train_zzz", "the job file jobs/x.yml", [])
    assert line.startswith("train_zzz (the job file jobs/x.yml): no role or playbook reads it;")
    assert "docs/variables.md" in line


@pytest.mark.parametrize(
    ("arg", "meant"),
    [
        (REGEX_ARG, {"train_progress_regex": REGEX_ARG.split("=", 1)[1]}),
        ("a=1 b=hello  world x", {"a": "1", "b": "hello  world x"}),
        ("b='hello world'", {"b": "hello world"}),
        ("words only", {}),
    ],
)
def test_what_a_split_e_meant(arg, meant):
    assert intended(arg) == meant


def test_a_split_e_shows_what_arrived_and_how_to_pass_it():
    line = raw_params_line(REGEX_ARG, parse_kv(REGEX_ARG))
    assert line.startswith(f"-e {shlex.quote(REGEX_ARG)} arrived split at its spaces")
    assert r"train_progress_regex='\[GPU0\]'" in line
    assert r"_raw_params='Epoch (?P<epoch>\d+) .* Loss: (?P<loss>[\d.]+)'" in line
    assert "-e @jobs/<name>.yml" in line
    assert f"train_progress_regex: '{REGEX_ARG.split('=', 1)[1]}'" in line
    as_json = json.dumps({"train_progress_regex": REGEX_ARG.split("=", 1)[1]})
    assert line.endswith(f"-e {shlex.quote(as_json)}")


def test_the_suggested_job_file_line_and_json_give_the_whole_value_back():
    line = raw_params_line(REGEX_ARG, parse_kv(REGEX_ARG))
    value = REGEX_ARG.split("=", 1)[1]
    job_file = line.split(" as ", 2)[2].split(" or pass it as JSON")[0]
    assert yaml.safe_load(job_file) == {"train_progress_regex": value}
    assert json.loads(shlex.split(line.rsplit(" -e ", 1)[1])[0]) == {"train_progress_regex": value}


def test_a_bare_word_is_not_name_value():
    line = raw_params_line("foo", parse_kv("foo"))
    assert line.startswith("-e foo is not name=value: it arrived as _raw_params='foo'")


def test_the_refusal_lists_each_lost_input_on_a_line():
    assert refusal(["a", "b"]).splitlines()[1:] == ["- a", "- b"]


# The collection as it is: its roles' prefixes and the playbooks' own names.


def test_every_role_is_a_prefix():
    roles = {path.parents[1].name for path in ROOT.glob("roles/*/meta/argument_specs.yml")}
    assert {prefix[:-1] for prefix in KNOWN.prefixes} == roles
    assert {"train_", "check_", "cluster_", "shared_storage_", "nvidia_driver_"} <= set(
        KNOWN.prefixes
    )


@pytest.mark.parametrize(
    "name",
    ["nproc", "job_id", "follow", "node", "rank", "lines", "socket_ifname", "cluster_group",
     "train_check", "train_log_follow", "train_max_restarts", "pytorch_cuda_variant"],
)  # fmt: skip
def test_the_playbooks_and_roles_names_are_known(name):
    assert name in KNOWN.names


def role_files() -> list[Path]:
    return sorted(
        path
        for path in ROOT.glob("roles/*/**/*")
        if path.is_file() and path.suffix in (".yml", ".j2") and path.name != "argument_specs.yml"
    )


@pytest.mark.parametrize("path", role_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_role_variable_a_role_reads_is_known(path):
    """A name a role reads without an argument spec would be refused where a user sets it."""
    text = path.read_text(encoding="utf-8")
    read = template_names(text) if path.suffix == ".j2" else data_names(yaml.safe_load(text))
    assert KNOWN.unknown(read) == []


# Every name the repository passes or sets: no false refusal.

MODULES = {path.stem for path in ROOT.glob("plugins/modules/*.py")}
# sandbox/up.yml's own variables (-e sandbox_nodes=...): it is no playbook of the collection.
SANDBOX_PREFIX = "sandbox_"
NAME = r"[A-Za-z_][\w-]*"
E_NAME = re.compile(rf"(?:-e|--extra-vars)[ =]+['\"]?({NAME})=")
E_JSON = re.compile(r"(?:-e|--extra-vars)[ =]+'(\{.*?\})'")
YAML_KEY = re.compile(rf"^\s*(?:#\s*)?({NAME}):(?:\s|$)", re.M)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
THIS_TEST = "test_preflight_refuses_lost_inputs.py"


def command_line_names(text: str) -> set[str]:
    """-e name=value and -e '{"name": ...}' in text (a Makefile, a page, a shell line)."""
    names = set(E_NAME.findall(text))
    for found in E_JSON.findall(text):
        try:
            names |= set(json.loads(found))
        except json.JSONDecodeError:
            continue
    return names


def markdown_names(text: str) -> set[str]:
    """The command lines' -e names, and the YAML keys of the code blocks that have a role's
    prefix (commented-out settings included), except module names in task examples."""
    names = command_line_names(text)
    for block in FENCE.findall(text):
        names |= {name for name in YAML_KEY.findall(block) if name.startswith(KNOWN.prefixes)}
    return names - MODULES


def yaml_keys(data: object) -> set[str]:
    return {str(key) for key in data} if isinstance(data, dict) else set()


def inventory_file_names(path: Path) -> set[str]:
    """A vars file's keys, and the settings it shows commented out."""
    text = path.read_text(encoding="utf-8")
    commented = {name for name in re.findall(rf"^#\s*({NAME}):", text, re.M)}
    return yaml_keys(yaml.safe_load(text)) | {n for n in commented if n.startswith(KNOWN.prefixes)}


def inventory_hosts_names(path: Path) -> set[str]:
    """The vars that a hosts file gives groups and hosts."""
    names: set[str] = set()

    def walk(group: dict) -> None:
        names.update(yaml_keys(group.get("vars")))
        for host in (group.get("hosts") or {}).values():
            names.update(yaml_keys(host))
        for child in (group.get("children") or {}).values():
            walk(child or {})

    for group in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).values():
        walk(group or {})
    return names


def molecule_names(path: Path) -> set[str]:
    """converge.yml's vars, molecule.yml's inventory group_vars and host_vars."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if path.name == "converge.yml":
        return {key for play in data for key in yaml_keys(play.get("vars"))}
    inventory = data.get("provisioner", {}).get("inventory", {})
    return {
        key
        for kind in ("group_vars", "host_vars")
        for values in (inventory.get(kind) or {}).values()
        for key in yaml_keys(values)
    }


def python_names(path: Path) -> set[str]:
    """The extra vars a test or bench passes: every key of a dict literal that holds a
    playbook variable (one with a role's prefix, job_id or nproc), and every keyword with a
    role's prefix (job_vars(job, train_shared_dir="/tmp"))."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
            keys = {key for key in keys if isinstance(key, str)}
            if any(key.startswith(KNOWN.prefixes) or key in ("job_id", "nproc") for key in keys):
                names |= keys
        elif isinstance(node, ast.Call):
            names |= {
                kw.arg for kw in node.keywords if kw.arg and kw.arg.startswith(KNOWN.prefixes)
            }
    return names


def sandbox_names(path: Path) -> set[str]:
    """The inventory vars that sandbox/up.yml has the sandbox's inventory set."""
    found: set[str] = set()

    def walk(data: object) -> None:
        if isinstance(data, dict):
            found.update(yaml_keys(data.get("sandbox_cluster_inventory_vars")))
            for value in data.values():
                walk(value)
        elif isinstance(data, list):
            for value in data:
                walk(value)

    walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def given(pattern: str, read, every_name: bool) -> list[pytest.param]:
    return [
        pytest.param(path, read, every_name, id=str(path.relative_to(ROOT)))
        for path in sorted(ROOT.glob(pattern))
        if path.is_file() and path.name != THIS_TEST
    ]


SOURCES = [
    # Inventories: their names are checked as an inventory's are (a role's prefix).
    *given("inventory/*/group_vars/**/*.yml", inventory_file_names, False),
    *given("inventory/*/host_vars/**/*.yml", inventory_file_names, False),
    *given("inventory/*/hosts.yml", inventory_hosts_names, False),
    *given("molecule/*/molecule.yml", molecule_names, False),
    *given("sandbox/*.yml", sandbox_names, False),
    *given("sandbox/roles/*/tasks/*.yml", sandbox_names, False),
    # Extra vars and job files: every name.
    *given("molecule/*/converge.yml", molecule_names, True),
    *given("molecule/*/tests/*.py", python_names, True),
    *given("tests/preflight/*.py", python_names, True),
    *given("sandbox/bench/*.py", python_names, True),
    *given("jobs/**/*.yml", lambda path: yaml_keys(yaml.safe_load(path.read_text())), True),
    *given("Makefile", lambda path: command_line_names(path.read_text()), True),
    *given("README.md", lambda path: markdown_names(path.read_text()), True),
    *given("docs/*.md", lambda path: markdown_names(path.read_text()), True),
]


@pytest.mark.parametrize(("path", "read", "every_name"), SOURCES)
def test_every_name_the_repository_passes_is_known(path, read, every_name):
    names = {name for name in read(path) if not name.startswith(SANDBOX_PREFIX)}
    lost = KNOWN.unknown(names, every_name)
    assert not lost, [unknown_line(name, str(path), KNOWN.closest(name)) for name in lost]


def test_the_repository_sources_are_read():
    """The readers above find names, so an empty pass would not hide a broken reader."""
    read = {param.id: param.values[1](param.values[0]) for param in SOURCES}
    assert "train_max_restarts" in read["inventory/example/group_vars/all/training.yml"]
    software = read["inventory/example/group_vars/all/software.yml"]
    assert {"nccl_version", "pytorch_wheelhouse_dir"} <= software  # commented out there
    assert "pytorch_wheelhouse_dir" in read["sandbox/up.yml"]
    assert "cluster_address" in read["molecule/centos/molecule.yml"]
    assert "pytorch_wheelhouse_dir" in read["molecule/sandbox/converge.yml"]
    launcher = read["molecule/sandbox/tests/launcher.py"]
    assert {"job_id", "train_data_src", "train_runs_dir"} <= launcher
    assert "cluster_master_port" in read["tests/preflight/test_preflight_rejects_bad_input.py"]


def test_the_command_line_and_page_readers_find_the_names():
    page = "\n".join(
        [
            "ansible-playbook playbooks/logs.yml -e job_id=X -e follow=true",
            """ansible-playbook playbooks/train.yml -e '{"train_script_args": ["50"]}'""",
            "```yaml",
            "# inventory/<yours>/group_vars/all/storage.yml",
            "shared_storage_type: nfs",
            "#   shared_storage_source: nfs1.example.com:/export/ml",
            "- name: A task's module is no variable",
            "  cluster_platform:",
            "```",
        ]
    )
    assert markdown_names(page) == {
        "job_id",
        "follow",
        "train_script_args",
        "shared_storage_type",
        "shared_storage_source",
    }
