"""Zero to JupyterHub 的配置（deploy/zero-to-jupyterhub/）：YAML 语法、用到的键在 chart 期望的位置、spawn 钩子能编译，
交换服务 ngshare 的几处配置（values.yaml 的 hub.services / loadRoles、ngshare.yaml）彼此对得上。

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


def _ngshare_docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all((K8S / "ngshare.yaml").read_text(encoding="utf-8")) if d}


def test_volumes_the_values_use_are_defined():
    claims = {d["metadata"]["name"]: d for d in
              yaml.safe_load_all((K8S / "volumes.yaml").read_text(encoding="utf-8")) if d}
    values_text = (K8S / "values.yaml").read_text(encoding="utf-8")
    used = set(re.findall(r"claimName['\"]?:\s*['\"]?([\w-]+)", values_text))
    # 只有助教的课程目录；没有所有 pod 共挂的交换目录卷（交换走 ngshare）
    assert used == {"lecture07-course"}
    assert used <= set(claims)
    assert all(d["kind"] == "PersistentVolumeClaim" and d["spec"]["accessModes"] == ["ReadWriteMany"]
               for d in claims.values())
    storage = _values()["singleuser"]["storage"]
    assert "extraVolumes" not in storage and "extraVolumeMounts" not in storage, storage
    code = _values()["hub"]["extraConfig"]["lecture07-roles"]
    assert "LECTURE07_EXCHANGE" not in code and "/srv/nbgrader/exchange" not in code, "spawn 钩子里不该再有交换目录"


def test_exchange_is_the_ngshare_service():
    """values.yaml 和 ngshare.yaml 指向同一个 ngshare：服务的地址和端口、两个 token 在 hub Secret 里的键、
    ngshare 唯一的管理员就是名单同步服务、名单服务读的正是 load_groups 的两个组；ngshare 的卷只挂在它自己的 pod 上。"""
    values, docs = _values(), _ngshare_docs()
    hub = values["hub"]
    assert set(hub["services"]) == {"ngshare", "ngshare-roster"}
    service, deployment = docs["Service"], docs["Deployment"]
    port = service["spec"]["ports"][0]["port"]
    assert hub["services"]["ngshare"]["url"] == f"http://{service['metadata']['name']}:{port}"
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    keys = {e["valueFrom"]["secretKeyRef"]["key"] for c in containers.values() for e in c["env"] if "valueFrom" in e}
    assert keys == {f"hub.services.{name}.apiToken" for name in hub["services"]}
    assert {e["valueFrom"]["secretKeyRef"]["name"] for c in containers.values() for e in c["env"]
            if "valueFrom" in e} == {"hub"}  # chart 的 Secret（fullnameOverride: ""）
    cmd = containers["ngshare"]["command"]
    assert cmd[cmd.index("--admins") + 1] == "ngshare-roster"
    env = {e["name"]: e.get("value") for e in containers["ngshare"]["env"]}
    assert env["JUPYTERHUB_SERVICE_PREFIX"] == "/services/ngshare/"
    assert env["JUPYTERHUB_SERVICE_URL"].rstrip("/").endswith(f":{port}")
    groups = set(hub["config"]["JupyterHub"]["load_groups"])
    role = hub["loadRoles"]["ngshare-roster"]
    assert role["services"] == ["ngshare-roster"]
    assert {s.split("!group=")[1] for s in role["scopes"]} == groups
    assert all(s.startswith("read:groups!group=") for s in role["scopes"])
    roster = {e["name"]: e.get("value") for e in containers["roster"]["env"]}
    assert {roster["LECTURE07_STUDENTS_GROUP"], roster["LECTURE07_GRADERS_GROUP"]} == groups
    # ngshare 的 PVC 只在它自己的 pod 上（values.yaml 挂的卷见 test_volumes_the_values_use_are_defined），RWO
    claim = docs["PersistentVolumeClaim"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]] == [claim["metadata"]["name"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # 只有代理能连 ngshare；ngshare 的 pod 不能连学生的 pod（不带 network-access-singleuser 标签）
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "hub.jupyter.org/network-access-singleuser" not in labels
    ingress = docs["NetworkPolicy"]["spec"]["ingress"]
    assert [f["podSelector"]["matchLabels"]["component"] for rule in ingress for f in rule["from"]] == ["proxy"]
    # 学生和助教的服务器经过代理连 ngshare
    code = hub["extraConfig"]["lecture07-roles"]
    assert '"LECTURE07_NGSHARE_URL": "http://proxy-public/services/ngshare"' in code


def test_chart_version_matches_image_jupyterhub():
    values_text = (K8S / "values.yaml").read_text(encoding="utf-8")
    chart = re.search(r"--version (\d+\.\d+\.\d+)", values_text).group(1)
    image = re.search(r"jupyterhub==(\d+)\.", (K8S / "Dockerfile").read_text(encoding="utf-8")).group(1)
    # chart 4.x 的 hub 是 JupyterHub 5.x（4.3.3 → 5.4.4）
    assert (chart.split(".")[0], image) == ("4", "5"), (chart, image)
