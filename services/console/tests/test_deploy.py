"""The console's Kubernetes manifest and Tilt resource agree with the code.

No cluster here (deploy/README.md: "checked only for syntax"), so these check what
can be checked without one: the kustomization lists the console, its settings are
ConsoleSettings' fields, it reaches the coordinator's pgwire Service port, its
probes ask a path the console serves without a session, and Tilt forwards it.
The manifests are read as ``kubectl kustomize`` renders them (``kubectl label
--local -o json`` turns them into JSON without a cluster); without kubectl those
tests are skipped.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loupe.console.app import PUBLIC
from loupe.console.settings import ConsoleSettings

REPO = Path(__file__).resolve().parents[3]
K8S = REPO / "deploy" / "k8s"


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl")


@functools.cache
def rendered() -> tuple[dict[str, Any], ...]:
    """Every object ``kubectl kustomize deploy/k8s`` renders, as JSON."""
    manifests = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    as_json = subprocess.run(
        ["kubectl", "label", "--local", "-f", "-", "-o", "json", "rendered=yes"],
        input=manifests,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    decoder = json.JSONDecoder()
    objects, at = [], 0
    while at < len(as_json.rstrip()):
        found, at = decoder.raw_decode(as_json, at)
        objects.append(found)
        while at < len(as_json) and as_json[at].isspace():
            at += 1
    return tuple(objects)


def documents(app: str) -> list[dict[str, Any]]:
    """The objects labelled ``app.kubernetes.io/name: <app>``."""
    return [
        doc for doc in rendered() if doc["metadata"]["labels"].get("app.kubernetes.io/name") == app
    ]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in docs if doc["kind"] == kind]
    return found


def test_every_manifest_is_in_the_kustomization() -> None:
    text = (K8S / "kustomization.yaml").read_text()
    block = text.split("resources:", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\s+- (\S+\.yaml)$", block, re.MULTILINE))
    on_disk = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert "console.yaml" in listed
    assert listed == on_disk


@needs_kubectl
def test_the_console_reaches_the_coordinators_pgwire_service() -> None:
    console = documents("loupe-console")
    coordinator = documents("loupe-coordinator")
    container = one(console, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item.get("value") for item in container["env"]}
    fields = {field.name for field in dataclasses.fields(ConsoleSettings)}
    # A setting name the console does not have would be ignored silently.
    for name in env:
        assert name.startswith("LOUPE_")
        assert name.removeprefix("LOUPE_").lower() in fields, name
    assert container["args"][0] == "console"
    assert env["LOUPE_HTTP_HOST"] == "0.0.0.0"
    # The coordinator asks for passwords: no auto-login attempt to be refused.
    coordinator_env = {
        item["name"]: item.get("value")
        for item in one(coordinator, "Deployment")["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    assert coordinator_env["LOUPE_AUTHENTICATOR"] == "password"
    assert env["LOUPE_AUTO_LOGIN_USER"] == ""
    service = one(coordinator, "Service")
    assert env["LOUPE_COORDINATOR_HOST"] == service["metadata"]["name"]
    pgwire = {port["name"]: port["port"] for port in service["spec"]["ports"]}["pgwire"]
    assert int(env["LOUPE_COORDINATOR_PGWIRE_PORT"]) == pgwire
    coordinator_args = one(coordinator, "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert f"--pgwire-port={pgwire}" in coordinator_args


@needs_kubectl
def test_the_console_service_probes_and_pod_security() -> None:
    console = documents("loupe-console")
    deployment = one(console, "Deployment")
    service = one(console, "Service")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert ports["http"] == int(env["LOUPE_HTTP_PORT"]) == 6876
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] == "http"
        # Answered without a session (no login redirect, no coordinator).
        assert get["path"] == "/healthz"
        assert get["path"].startswith(PUBLIC)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["limits"]
    assert container["resources"]["requests"]


def test_tilt_forwards_the_console() -> None:
    tiltfile = (REPO / "tilt" / "Tiltfile").read_text()
    assert "'loupe-console'" in tiltfile
    assert "'6876:6876'" in tiltfile


@needs_kubectl
def test_kustomize_puts_the_console_in_the_namespace() -> None:
    console = documents("loupe-console")
    assert sorted(doc["kind"] for doc in console) == ["Deployment", "Service"]
    assert all(doc["metadata"]["namespace"] == "loupe" for doc in console)
