"""Zero to JupyterHub 的配置（deploy/zero-to-jupyterhub/）：YAML 语法、用到的键在 chart 期望的位置、spawn 钩子能编译。

不在 Kubernetes 上运行：只防止 values.yaml 里出现 chart 不认识的键（例如 hub.loadGroups，chart 会静默忽略它，
学生就没有组、谁都不是助教）。键名来自 chart 的 values.schema.json（hub、singleuser、cull、prePuller、scheduling 的文档）。
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

K8S = Path(__file__).resolve().parents[1] / "deploy" / "zero-to-jupyterhub"
# chart 顶层和这里用到的子键（chart 的 schema 不许有别的键：additionalProperties: false）
CHART_KEYS = {
    None: {"fullnameOverride", "nameOverride", "enabled", "imagePullSecrets", "imagePullSecret", "hub", "rbac",
           "proxy", "singleuser", "scheduling", "ingress", "prePuller", "custom", "cull", "debug", "global",
           "apps", "cleanup"},
    "hub": {"config", "extraConfig", "loadRoles", "db", "image", "extraEnv", "extraFiles", "resources", "args",
            "command", "service", "baseUrl", "cookieSecret", "concurrentSpawnLimit", "activeServerLimit",
            "consecutiveFailureLimit", "allowNamedServers", "namedServerLimitPerUser", "services", "networkPolicy",
            "extraVolumes", "extraVolumeMounts", "nodeSelector", "tolerations", "labels", "annotations"},
    "singleuser": {"image", "defaultUrl", "memory", "cpu", "extraEnv", "lifecycleHooks", "storage", "cmd",
                   "startTimeout", "uid", "fsGid", "networkPolicy", "profileList", "extraFiles", "nodeSelector",
                   "extraResource", "extraLabels", "extraAnnotations", "initContainers", "extraContainers",
                   "serviceAccountName", "allowPrivilegeEscalation", "events", "extraTolerations",
                   "extraNodeAffinity", "extraPodAffinity", "extraPodAntiAffinity", "networkTools",
                   "cloudMetadata", "podNameTemplate", "extraPodConfig"},
    "singleuser.storage": {"type", "capacity", "extraVolumes", "extraVolumeMounts", "dynamic", "static",
                           "homeMountPath", "extraLabels"},
    "cull": {"enabled", "timeout", "every", "users", "adminUsers", "removeNamedServers", "maxAge", "concurrency"},
}


def _values() -> dict:
    return yaml.safe_load((K8S / "values.yaml").read_text(encoding="utf-8"))


def _at(values: dict, dotted: str | None) -> dict:
    node = values
    for part in (dotted.split(".") if dotted else []):
        node = node[part]
    return node


def test_values_keys_are_chart_keys():
    values = _values()
    for where, allowed in CHART_KEYS.items():
        unknown = set(_at(values, where)) - allowed
        assert not unknown, f"values.yaml 的 {where or '顶层'} 下有 chart 不认识的键：{sorted(unknown)}"


def test_groups_and_users_are_in_hub_config():
    config = _values()["hub"]["config"]
    groups = config["JupyterHub"]["load_groups"]
    assert set(groups) == {"nbgrader-cs224n-lecture07", "formgrade-cs224n-lecture07"}
    members = {u for g in groups.values() for u in g["users"]}
    assert members == set(config["Authenticator"]["allowed_users"])


def test_spawn_hook_compiles_and_handles_both_volume_shapes():
    code = _values()["hub"]["extraConfig"]["lecture07-roles"]
    tree = ast.parse(code)  # 语法错误在 hub 启动时才会暴露
    ns = {}
    exec(compile(ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef)], type_ignores=[]),
                 "lecture07-roles", "exec"), ns)
    hook = ns["lecture07_roles"]

    class Group:
        name = "formgrade-cs224n-lecture07"

    for volumes, mounts in [([{"name": "home"}], [{"name": "home", "mountPath": "/home/jovyan"}]),
                            ({"home": {"name": "home"}}, {"home": {"name": "home", "mountPath": "/home/jovyan"}})]:
        spawner = type("S", (), {})()
        spawner.user = type("U", (), {"groups": [Group()]})()
        spawner.environment, spawner.volumes, spawner.volume_mounts = {}, volumes, mounts
        hook(spawner)
        names = [v["name"] for v in (spawner.volumes.values() if isinstance(spawner.volumes, dict) else spawner.volumes)]
        assert names == ["home", "course"]
        assert spawner.environment["JUPYTER_CONFIG_PATH"].endswith("/grader")


def test_volumes_the_values_use_are_defined():
    claims = {d["metadata"]["name"]: d for d in
              yaml.safe_load_all((K8S / "volumes.yaml").read_text(encoding="utf-8")) if d}
    values_text = (K8S / "values.yaml").read_text(encoding="utf-8")
    used = set(re.findall(r"claimName['\"]?:\s*['\"]?([\w-]+)", values_text))
    assert used == {"lecture07-exchange", "lecture07-course"}
    assert used <= set(claims)
    assert all(d["kind"] == "PersistentVolumeClaim" and d["spec"]["accessModes"] == ["ReadWriteMany"]
               for d in claims.values())


def test_chart_version_matches_image_jupyterhub():
    values_text = (K8S / "values.yaml").read_text(encoding="utf-8")
    chart = re.search(r"--version (\d+\.\d+\.\d+)", values_text).group(1)
    image = re.search(r"jupyterhub==(\d+)\.", (K8S / "Dockerfile").read_text(encoding="utf-8")).group(1)
    # chart 4.x 的 hub 是 JupyterHub 5.x（4.3.3 → 5.4.4）
    assert (chart.split(".")[0], image) == ("4", "5"), (chart, image)
