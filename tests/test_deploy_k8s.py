"""Zero to JupyterHub 的配置（deploy/zero-to-jupyterhub/）：YAML 语法、用到的键在 chart 期望的位置、spawn 钩子能编译，
交换服务 ngshare 的几处配置（values.yaml 的 hub.services / loadRoles、ngshare.yaml）彼此对得上。

最后两个测试用真的 KubeSpawner（不连集群）从 values.yaml 生成学生和助教的 pod 清单，检查镜像、资源、环境变量和卷。

不在 Kubernetes 上运行：前面几个测试防止 values.yaml 里出现 chart 不认识的键（例如 hub.loadGroups，chart 会静默忽略它，
学生就没有组、谁都不是助教）。键名来自 chart 的 values.schema.json（hub、singleuser、cull、prePuller、scheduling 的文档）。
"""
from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import pytest
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
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    image = re.search(r"jupyterhub==(\d+)\.", dockerfile).group(1)
    # ngshare 的 venv 里的 jupyterhub 也是 hub 的版本（requirements-ngshare.txt 写的是单机版的 6.1.1）
    assert set(re.findall(r"jupyterhub==(\d[\d.]*)", dockerfile)) == {"5.4.4"}, dockerfile
    assert "requirements-ngshare-k8s.txt" in dockerfile.split("python -m venv /opt/ngshare")[1].split("\n")[0]
    # chart 4.x 的 hub 是 JupyterHub 5.x（4.3.3 → 5.4.4）
    assert (chart.split(".")[0], image) == ("4", "5"), (chart, image)


# ---- 用真的 KubeSpawner 生成学生和助教的 pod 清单 ----
# chart 把 values.yaml 交给 hub 里的 jupyterhub_config.py（z2jh 4.3.3 的 jupyterhub/files/hub/jupyterhub_config.py），
# 它再把 singleuser.* 设成 KubeSpawner 的选项、最后 exec hub.extraConfig。下面照抄这份配置里本课程用到的那几段，
# 和 chart 4.3.3 的 values.yaml 里这些键的默认值；pod 清单本身由 KubeSpawner 生成（不连 Kubernetes）。
CHART_SINGLEUSER_DEFAULTS = {
    "uid": 1000, "fsGid": 100, "allowPrivilegeEscalation": False, "cmd": "jupyterhub-singleuser",
    "extraLabels": {"hub.jupyter.org/network-access-hub": "true"}, "extraEnv": {}, "lifecycleHooks": {},
    "memory": {"guarantee": "1G"}, "cpu": {},
    "storage": {"type": "dynamic", "capacity": "10Gi", "homeMountPath": "/home/jovyan",
                "dynamic": {"volumeNameTemplate": "volume-{user_server}", "storageAccessModes": ["ReadWriteOnce"]}},
}
GRADERS, STUDENTS = "formgrade-cs224n-lecture07", "nbgrader-cs224n-lecture07"


def _merged(defaults: dict, values: dict) -> dict:
    out = dict(defaults)
    for key, value in values.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _z2jh_config(values: dict):
    """chart 的 jupyterhub_config.py 里和这份 values.yaml 有关的几段（同样的键、同样的顺序）。"""
    from traitlets.config import Config

    c = Config()
    single = _merged(CHART_SINGLEUSER_DEFAULTS, values["singleuser"])
    for trait, key in [("uid", "uid"), ("fs_gid", "fsGid"), ("extra_labels", "extraLabels"),
                       ("lifecycle_hooks", "lifecycleHooks"), ("environment", "extraEnv")]:
        if single.get(key) is not None:
            c.KubeSpawner[trait] = single[key]
    for trait, (group, key) in {"mem_limit": ("memory", "limit"), "mem_guarantee": ("memory", "guarantee"),
                                "cpu_limit": ("cpu", "limit"), "cpu_guarantee": ("cpu", "guarantee")}.items():
        if single[group].get(key) is not None:
            c.KubeSpawner[trait] = single[group][key]
    c.KubeSpawner.image = f"{single['image']['name']}:{single['image']['tag']}"
    c.KubeSpawner.allow_privilege_escalation = single["allowPrivilegeEscalation"]
    storage = single["storage"]
    assert storage["type"] == "dynamic"
    name = storage["dynamic"]["volumeNameTemplate"]
    c.KubeSpawner.storage_pvc_ensure = True
    c.KubeSpawner.storage_capacity = storage["capacity"]
    c.KubeSpawner.volumes = {name: {"name": name, "persistentVolumeClaim": {"claimName": "{pvc_name}"}}}
    c.KubeSpawner.volume_mounts = {name: {"mountPath": storage["homeMountPath"], "name": name, "subPath": None}}
    extra = storage.get("extraVolumes") or {}
    volumes = {**c.KubeSpawner.volumes, **(extra if isinstance(extra, dict) else {v["name"]: v for v in extra})}
    extra = storage.get("extraVolumeMounts") or {}
    mounts = {**c.KubeSpawner.volume_mounts,
              **(extra if isinstance(extra, dict) else {f"{i}-{m['name']}": m for i, m in enumerate(extra)})}
    c.KubeSpawner.volumes, c.KubeSpawner.volume_mounts = volumes, mounts
    c.Spawner.cmd = single["cmd"]
    c.Spawner.default_url = single["defaultUrl"]
    for key, code in sorted(values["hub"]["extraConfig"].items()):
        exec(code, {"c": c})
    return c


def _pod(values: dict, name: str, group: str) -> dict:
    """KubeSpawner 给这个用户生成的 pod 清单（先跑 pre_spawn_hook，和 hub 启动服务器时一样）。"""
    import asyncio

    from kubernetes_asyncio.client import ApiClient
    from kubespawner import KubeSpawner

    user = type("User", (), {"name": name, "id": 7, "url": f"/user/{name}/",
                             "groups": [type("Group", (), {"name": group})()]})()

    async def build():
        spawner = KubeSpawner(config=_z2jh_config(values), user=user, _mock=True)
        spawner.run_pre_spawn_hook()
        async with ApiClient() as api:
            return api.sanitize_for_serialization(await spawner.get_pod_manifest())

    return asyncio.run(build())


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    """KubeSpawner 一创建就读 kube-config（只读配置，不连集群）：给它一个指向不存在的集群的。"""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "trial",
        "clusters": [{"name": "trial", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "trial", "context": {"cluster": "trial", "user": "trial", "namespace": "lecture07"}}],
        "users": [{"name": "trial", "user": {"token": "not-a-real-token"}}]}), encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(path))


def _check_pod(pod: dict, grader: bool) -> None:
    """一个 pod 清单该有的样子；不符合时抛出 AssertionError，说明哪里不对。"""
    spec = pod["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == "registry.example.edu/lecture07:v1", container["image"]
    # JupyterHub 的 G 是 2^30 字节：1.2G 是 1,288,490,188 字节，2G 是 2,147,483,648 字节
    assert container["resources"] == {"requests": {"memory": int(1.2 * 2**30), "cpu": 0.1},
                                      "limits": {"memory": 2 * 2**30, "cpu": 1.0}}, container["resources"]
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["JUPYTER_CONFIG_PATH"] == f"/opt/lecture07/jupyter-config/{'grader' if grader else 'student'}"
    assert env["LECTURE07_NGSHARE_URL"] == "http://proxy-public/services/ngshare"
    assert ("LECTURE07_COURSE_ROOT" in env) == grader, "只有助教的服务器知道课程目录在哪里"
    claims = sorted(v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    home = f"claim-{pod['metadata']['labels']['hub.jupyter.org/username']}"
    assert claims == sorted([home] + (["lecture07-course"] if grader else [])), f"pod 挂的卷：{claims}"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert "/home/jovyan" in mounts.values()
    assert (mounts.get("course") == "/home/jovyan/lecture07") == grader
    assert not any("exchange" in m for m in mounts.values()), "交换走 ngshare，不挂交换目录"
    assert container["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["fsGroup"] == 100
    assert container["lifecycle"]["postStart"]["exec"]["command"][-1] == "ln -sfn /opt/lecture07/lib /home/jovyan/lib"


def test_kubespawner_builds_the_student_and_grader_pods(kubeconfig):
    values = _values()
    student = _pod(values, "student1", STUDENTS)
    grader = _pod(values, "instructor1", GRADERS)
    _check_pod(student, grader=False)
    _check_pod(grader, grader=True)
    # 两个 pod 的启动命令相同（差别只在卷、挂载和环境变量，上面逐项查过）
    assert student["spec"]["containers"][0]["args"] == grader["spec"]["containers"][0]["args"]


def test_pod_check_rejects_a_course_volume_for_students_and_an_exchange_volume(kubeconfig):
    """变异：把课程目录也挂给学生、或者把交换目录卷放回去，上面的检查必须失败。"""
    values = _values()
    to_everyone = copy.deepcopy(values)
    hook = to_everyone["hub"]["extraConfig"]["lecture07-roles"]
    to_everyone["hub"]["extraConfig"]["lecture07-roles"] = hook.replace("    if graders:\n", "    if True:\n")
    assert to_everyone["hub"]["extraConfig"]["lecture07-roles"] != hook
    with pytest.raises(AssertionError, match="LECTURE07_COURSE_ROOT|pod 挂的卷"):
        _check_pod(_pod(to_everyone, "student1", STUDENTS), grader=False)
    exchange = copy.deepcopy(values)
    exchange["singleuser"]["storage"]["extraVolumes"] = [
        {"name": "exchange", "persistentVolumeClaim": {"claimName": "lecture07-exchange"}}]
    exchange["singleuser"]["storage"]["extraVolumeMounts"] = [{"name": "exchange", "mountPath": "/srv/nbgrader/exchange"}]
    with pytest.raises(AssertionError, match="pod 挂的卷|交换"):
        _check_pod(_pod(exchange, "student1", STUDENTS), grader=False)
