"""One run folder of the local control plane: its file layout, the state file that lets a later
command find the running plane, and the kubeconfigs and credentials that reach it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from rljob.dev import pki
from rljob.dev.kubeapi import Credentials


@dataclass
class RunState:
    """What `rljob dev down`, `rljob dev env` and reusing fixtures need to find a running plane."""

    profile: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    launcher_pid: int = 0
    ready: bool = False
    pod_cidr: str = ""  # kwok's pod IP range, inside 127.0.0.0/8 (rljob.dev.podnet)

    @staticmethod
    def path(run_dir: Path) -> Path:
        return run_dir / "state.json"

    def save(self, run_dir: Path) -> None:
        write_json(self.path(run_dir), asdict(self))

    @classmethod
    def load(cls, run_dir: Path) -> RunState:
        return cls(**json.loads(cls.path(run_dir).read_text()))


def write_json(path: Path, data: object) -> None:
    """Writes a state file whole or not at all: a reader never sees half of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


class RunDir:
    """File layout of one run folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.pki = pki.PKIPaths(root / "pki")
        self.kubeconfig = root / "admin.kubeconfig"
        self.audit_log = root / "logs" / "audit.log"
        self.audit_policy = root / "audit-policy.yaml"
        self.stages = root / "kwok-stages.yaml"
        self.etcd_data = root / "etcd"


def admin_credentials(run: RunDir, state: RunState) -> Credentials:
    return Credentials(
        server=f"https://127.0.0.1:{state.ports['apiserver']}",
        ca_file=run.pki.ca_crt,
        cert_file=run.pki.admin_crt,
        key_file=run.pki.admin_key,
    )


def write_kubeconfig(
    run: RunDir, server: str, *, token: str | None = None, path: Path | None = None
) -> Path:
    """An admin kubeconfig (client certificate), or a token one when token is given."""
    user: dict[str, str] = (
        {"token": token}
        if token
        else {"client-certificate": str(run.pki.admin_crt), "client-key": str(run.pki.admin_key)}
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "rljob-dev",
                "cluster": {"server": server, "certificate-authority": str(run.pki.ca_crt)},
            }
        ],
        "users": [{"name": "rljob-dev", "user": user}],
        "contexts": [
            {"name": "rljob-dev", "context": {"cluster": "rljob-dev", "user": "rljob-dev"}}
        ],
        "current-context": "rljob-dev",
    }
    target = path or run.kubeconfig
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target
