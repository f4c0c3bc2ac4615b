"""The Kubernetes manifests in deploy/kubernetes/: valid against Kubernetes' own schemas (offline,
strict: a misspelt field fails), and consistent with each other, with the image and with the
registry's settings, in what no schema can see."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from registry.http.auth import Plane
from registry.http.routes import UNVERSIONED
from registry.settings import (
    ENV_PREFIX,
    KEYS,
    Settings,
    SettingsError,
    env_name,
    is_loopback,
    load_settings,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = DEPLOY / "kubernetes"
KUSTOMIZATION = MANIFESTS / "kustomization.yaml"
# The oldest Kubernetes the guide names, and the newest whose schemas the validator carries.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
# What the downward API gives a pod, in a namespace of the user's choosing.
SAMPLE_POD = {
    "status.podIP": "10.244.1.7",
    "metadata.name": "registry-1",
    "metadata.namespace": "team-a",
}
SHUTDOWN_MARGIN = 10  # seconds the drain after the shutdown delay may take, and some

Manifest = dict[str, Any]


def _load(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _kustomization() -> Manifest:
    return _load(KUSTOMIZATION)[0]


def _manifests() -> list[tuple[str, Manifest]]:
    """Every resource the kustomization lists, with the file it is in."""
    return [
        (name, doc) for name in _kustomization()["resources"] for doc in _load(MANIFESTS / name)
    ]


def _one(kind: str, name: str | None = None) -> Manifest:
    found = [
        doc
        for _, doc in _manifests()
        if doc["kind"] == kind and name in (None, doc["metadata"]["name"])
    ]
    assert 1 == len(found), f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _env_file(path: Path) -> dict[str, str]:
    """An env file as kustomize reads it: KEY=VALUE lines, blanks and # comments skipped."""
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, equals, value = line.partition("=")
            assert equals, f"{path.name}: {line!r} is not KEY=VALUE"
            values[key.strip()] = value
    return values


def _generated_secrets() -> dict[str, dict[str, str]]:
    """The Secrets the kustomization generates, by name, filled from the committed examples of
    their env files (the real files are the operator's own and never committed)."""
    secrets: dict[str, dict[str, str]] = {}
    for generator in _kustomization().get("secretGenerator", []):
        values: dict[str, str] = {}
        for env in generator.get("envs", []):
            values.update(_env_file(MANIFESTS / f"{env}.example"))
        secrets[generator["name"]] = values
    return secrets


def _statefulset() -> Manifest:
    return _one("StatefulSet")


def _pod_spec() -> Manifest:
    spec: Manifest = _statefulset()["spec"]["template"]["spec"]
    return spec


def _container() -> Manifest:
    containers = _pod_spec()["containers"]
    assert 1 == len(containers)
    container: Manifest = containers[0]
    return container


def _pod_labels() -> dict[str, str]:
    labels: dict[str, str] = _statefulset()["spec"]["template"]["metadata"]["labels"]
    return labels


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expand(value: str, defined: dict[str, str]) -> str:
    """`$(VAR)` as the kubelet expands it: a variable defined before, or left as written."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return defined.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, value)


def _environment() -> dict[str, str]:
    """The container's environment as the kubelet makes it for a sample pod: envFrom first,
    then env in order, each value expanded with what came before."""
    configmaps = {
        doc["metadata"]["name"]: doc.get("data", {})
        for _, doc in _manifests()
        if doc["kind"] == "ConfigMap"
    }
    secrets = _generated_secrets()
    env: dict[str, str] = {}
    for source in _container().get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmaps[source["configMapRef"]["name"]])
        if "secretRef" in source:
            env.update(secrets[source["secretRef"]["name"]])
    for item in _container().get("env", []):
        if "value" in item:
            env[item["name"]] = _expand(item["value"], env)
        else:
            env[item["name"]] = SAMPLE_POD[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _settings() -> Settings:
    return load_settings(environ=_environment()).settings


def _container_port() -> tuple[str, int]:
    ports = _container()["ports"]
    assert 1 == len(ports)
    return ports[0]["name"], ports[0]["containerPort"]


def _services(*, headless: bool) -> list[Manifest]:
    return [
        doc
        for _, doc in _manifests()
        if doc["kind"] == "Service" and (doc["spec"].get("clusterIP") == "None") == headless
    ]


def _headless() -> Manifest:
    found = _services(headless=True)
    assert 1 == len(found), "one headless Service, for the peers"
    return found[0]


def _client_service() -> Manifest:
    found = _services(headless=False)
    assert 1 == len(found), "one Service with a cluster IP, for the clients"
    return found[0]


def _validate(manifest: Manifest, version: str) -> None:
    """Strict validation, its failure told in a line (the error's repr holds the schema)."""
    problem = ""
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path) or "the top"
        problem = f"{manifest['kind']} at {where}: {exc.message}"
    if problem:
        pytest.fail(problem, pytrace=False)


def _schema_cases() -> list[Any]:
    return [
        pytest.param(doc, version, id=f"{file}:{doc['kind']}/{doc['metadata']['name']}@{version}")
        for file, doc in _manifests()
        for version in KUBERNETES_VERSIONS
    ]


class TestFiles:
    def test_kustomization_lists_every_manifest(self):
        """Every YAML file beside the kustomization is one of its resources, and each exists."""
        listed = set(_kustomization()["resources"])
        present = {p.name for p in MANIFESTS.glob("*.yaml")} - {KUSTOMIZATION.name}
        assert present == listed

    def test_manifests_name_no_namespace(self):
        """The namespace is the operator's choice (`kubectl apply -k ... -n NAMESPACE`)."""
        assert [] == [
            doc["metadata"]["name"] for _, doc in _manifests() if "namespace" in doc["metadata"]
        ]
        assert "namespace" not in _kustomization()

    def test_real_credentials_are_never_committed(self):
        """The generator's env files are ignored by git; their examples say every credential."""
        ignored = (MANIFESTS / ".gitignore").read_text().split()
        for generator in _kustomization()["secretGenerator"]:
            for env in generator["envs"]:
                assert env in ignored
        assert {
            "REGISTRY_CREDENTIALS__CLIENTS",
            "REGISTRY_CREDENTIALS__ADMINS",
            "REGISTRY_CREDENTIALS__PEER",
        } == set(_generated_secrets()["registry-credentials"])

    def test_example_credentials_say_they_are_placeholders(self):
        """Every example password says it is to be replaced, so none is deployed unnoticed."""
        for value in _generated_secrets()["registry-credentials"].values():
            for credential in value.split(","):
                assert "REPLACE-ME" in credential.partition(":")[2]


class TestSchemas:
    @pytest.mark.parametrize(("manifest", "version"), _schema_cases())
    def test_manifest_is_valid(self, manifest: Manifest, version: str):
        """Each resource validates against the Kubernetes schema of its kind, strictly."""
        _validate(manifest, version)

    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    def test_generated_secret_is_valid(self, version: str):
        """The Secret the kustomization makes from the example credentials validates too."""
        for name, values in _generated_secrets().items():
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name},
                "type": "Opaque",
                "stringData": values,
            }
            _validate(secret, version)

    def test_a_misspelt_field_fails(self):
        """The validation is strict: a field Kubernetes does not know is refused, not ignored."""
        broken = copy.deepcopy(_statefulset())
        broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


class TestServices:
    def test_headless_service_finds_starting_pods(self):
        """The peers' Service is headless, publishes pods before they are ready, selects the
        StatefulSet's pods on the container's port, and is the StatefulSet's serviceName."""
        headless = _headless()
        assert headless["spec"]["publishNotReadyAddresses"] is True
        assert _selects(headless["spec"]["selector"], _pod_labels())
        assert headless["metadata"]["name"] == _statefulset()["spec"]["serviceName"]
        assert [("http", _container_port()[1])] == [
            (p["name"], p["port"]) for p in headless["spec"]["ports"]
        ]
        assert headless["spec"]["ports"][0]["targetPort"] in _container_port()

    def test_client_service_routes_to_ready_pods_only(self):
        """The clients' Service has a cluster IP, selects the same pods, and only ready ones."""
        service = _client_service()
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
        assert not service["spec"].get("publishNotReadyAddresses", False)
        assert _selects(service["spec"]["selector"], _pod_labels())
        assert service["spec"]["selector"] == _headless()["spec"]["selector"]
        assert service["spec"]["ports"][0]["targetPort"] in _container_port()

    def test_statefulset_selects_its_pods(self):
        """The StatefulSet's selector matches its own template's labels."""
        assert _selects(_statefulset()["spec"]["selector"]["matchLabels"], _pod_labels())

    def test_disruption_budget_takes_one_pod_at_most(self):
        """The PodDisruptionBudget selects the pods and lets one be down at a time."""
        budget = _one("PodDisruptionBudget")
        assert 1 == budget["spec"]["maxUnavailable"]
        assert _selects(budget["spec"]["selector"]["matchLabels"], _pod_labels())


class TestSettings:
    def test_every_variable_is_a_setting(self):
        """Every REGISTRY_* variable the pod gets names a real setting, by its section: none
        is a deprecated flat name."""
        known = {env_name(section, key) for section, keys in KEYS.items() for key in keys}
        names = [key for key in _environment() if key.startswith(ENV_PREFIX)]
        assert names
        assert [] == [n for n in names if n not in known]
        assert () == load_settings(environ=_environment()).deprecations

    def test_settings_load(self):
        """The pod's environment loads as settings, every reference resolved: the bind is
        public and protected, the store is on the claim's volume, peers come from the headless
        Service's DNS name and the node knows its own URL, all on the container's port."""
        env = _environment()
        assert [] == [key for key, value in env.items() if "$(" in value]
        settings = _settings()
        _, port = _container_port()
        assert not is_loopback(settings.server.host)
        assert settings.secured and settings.credentials.peer
        assert [] == settings.missing_credentials()
        assert port == settings.server.port == settings.peers.dns_port
        namespace = SAMPLE_POD["metadata.namespace"]
        # Absolute (the final dot): a pod's resolver would try its search domains first.
        assert f"{_headless()['metadata']['name']}.{namespace}.svc.cluster.local." == (
            settings.peers.dns_name
        )
        own = urlsplit(settings.peers.my_url)
        assert (SAMPLE_POD["status.podIP"], port) == (own.hostname, own.port)
        assert own.path == settings.peers.dns_path
        mounts = {m["mountPath"]: m["name"] for m in _container()["volumeMounts"]}
        claims = {c["metadata"]["name"] for c in _statefulset()["spec"]["volumeClaimTemplates"]}
        assert mounts.get(settings.store.data_dir) in claims

    def test_service_links_cannot_break_the_settings(self):
        """Kubernetes gives a pod REGISTRY_SERVICE_HOST, REGISTRY_PORT=tcp://... and more for a
        Service named `registry`, unless the pod turns service links off; they must not reach
        the settings, which refuse unknown REGISTRY_* variables."""
        links: dict[str, str] = {}
        for doc in _services(headless=False):
            name = doc["metadata"]["name"].upper().replace("-", "_")
            ip = "10.96.0.12"
            for port in doc["spec"]["ports"]:
                number, proto = port["port"], port.get("protocol", "TCP")
                links[f"{name}_SERVICE_HOST"] = ip
                links[f"{name}_SERVICE_PORT"] = str(number)
                links[f"{name}_SERVICE_PORT_{port['name'].upper()}"] = str(number)
                links[f"{name}_PORT"] = f"{proto.lower()}://{ip}:{number}"
                prefix = f"{name}_PORT_{number}_{proto}"
                links[prefix] = f"{proto.lower()}://{ip}:{number}"
                links[f"{prefix}_PROTO"] = proto.lower()
                links[f"{prefix}_PORT"] = str(number)
                links[f"{prefix}_ADDR"] = ip
        environ = {**links, **_environment()}  # the pod's own variables win
        if _pod_spec().get("enableServiceLinks", True):
            load_settings(environ=environ)
        else:  # why they are off: the node would refuse to start, saying so
            with pytest.raises(SettingsError, match="enableServiceLinks: false"):
                load_settings(environ=environ)

    def test_grace_period_covers_the_shutdown_delay(self):
        """The kubelet waits out the shutdown delay and the drain after it before it kills."""
        delay = _settings().server.shutdown_delay
        assert delay > 0, "without a delay, requests still routed to a stopping pod fail"
        assert _pod_spec()["terminationGracePeriodSeconds"] > delay + SHUTDOWN_MARGIN


class TestContainer:
    def test_probes(self):
        """Startup and liveness ask /healthz, readiness /readyz, on the container's port; both
        paths are open (no credential), so a secured node answers the kubelet."""
        container = _container()
        asked = {
            probe: (container[probe]["httpGet"]["path"], container[probe]["httpGet"]["port"])
            for probe in ("startupProbe", "livenessProbe", "readinessProbe")
        }
        assert {"startupProbe": "/healthz", "livenessProbe": "/healthz"} == {
            probe: path for probe, (path, _) in asked.items() if probe != "readinessProbe"
        }
        assert "/readyz" == asked["readinessProbe"][0]
        for _, port in asked.values():
            assert port in _container_port()
        for path in ("/healthz", "/readyz"):
            assert Plane.OPEN is UNVERSIONED[path]["GET"].plane

    def test_startup_probe_waits_for_a_restore(self):
        """The port opens after the store is restored: the startup probe allows a minute at
        least before liveness may restart the container."""
        probe = _container()["startupProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 60

    def test_runs_unprivileged(self):
        """Non-root with the image's uid and gid, the volume writable by its group, no
        privilege escalation, no capabilities, the runtime's seccomp profile."""
        pod, container = _pod_spec()["securityContext"], _container()["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert 0 != pod["runAsUser"]
        assert pod["runAsGroup"] == pod["fsGroup"]
        assert "RuntimeDefault" == pod["seccompProfile"]["type"]
        assert container["allowPrivilegeEscalation"] is False
        assert ["ALL"] == container["capabilities"]["drop"]
        for key in ("runAsUser", "runAsGroup"):
            assert container.get(key, pod[key]) == pod[key]

    def test_image_user_is_the_pods(self):
        """The image's USER (deploy/Containerfile) is the uid and gid the pod runs as, by number
        (a name cannot be checked against runAsNonRoot)."""
        users = re.findall(r"^\s*USER\s+(\S+)", (DEPLOY / "Containerfile").read_text(), re.M)
        assert users, "the Containerfile sets no USER"
        uid, _, gid = users[-1].partition(":")
        pod = _pod_spec()["securityContext"]
        assert str(pod["runAsUser"]) == uid
        assert gid in ("", str(pod["runAsGroup"]))

    def test_root_filesystem_is_read_only_but_what_it_writes(self):
        """The root file system is read-only; the store and temporary files have volumes."""
        container = _container()
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounted = {m["mountPath"] for m in container["volumeMounts"]}
        assert {_settings().store.data_dir, "/tmp"} <= mounted

    def test_env_comes_from_the_configmap_and_the_secret(self):
        """envFrom names the ConfigMap and the generated Secret that exist."""
        sources = _container()["envFrom"]
        assert {_one("ConfigMap")["metadata"]["name"]} == {
            s["configMapRef"]["name"] for s in sources if "configMapRef" in s
        }
        assert set(_generated_secrets()) == {
            s["secretRef"]["name"] for s in sources if "secretRef" in s
        }

    def test_resources_are_bounded(self):
        """CPU and memory are requested and limited; the memory limit is what the node's
        watermark follows, so it is no lower than the request."""
        resources = _container()["resources"]
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[part])
        assert resources["limits"]["memory"] == resources["requests"]["memory"]


class TestStatefulSet:
    def test_three_nodes_started_in_parallel_and_rolled(self):
        """Three replicas created in parallel, updated by a rolling update."""
        spec = _statefulset()["spec"]
        assert 3 == spec["replicas"]
        assert "Parallel" == spec["podManagementPolicy"]
        assert "RollingUpdate" == spec["updateStrategy"]["type"]

    def test_spread_across_machines_preferred(self):
        """The pods are spread across machines where the cluster has them, never required to."""
        spec = _pod_spec()
        spread = [
            c
            for c in spec["topologySpreadConstraints"]
            if c["topologyKey"] == "kubernetes.io/hostname"
        ]
        assert spread
        for constraint in spec["topologySpreadConstraints"]:
            assert "ScheduleAnyway" == constraint["whenUnsatisfiable"]
            assert _selects(constraint["labelSelector"]["matchLabels"], _pod_labels())
        anti = spec.get("affinity", {}).get("podAntiAffinity", {})
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
