# 第 7 讲课程仓库的全部命令。新机器上只需要：
#   make lab    —— 装好课程环境（requirements.txt：学生和助教要用的），检查环境，打开学生的 JupyterLab（中文界面）：
#                  第一次运行时把各页和练习复制到 mywork/（学生自己的副本，git 忽略），打开的是副本，课程文件永远不被改动
#   make update —— 取课程的新版本（git pull），按单元格并进 mywork/：答案和运行结果留着（lib/coursework.py）
#   make lab-ta —— 助教的 JupyterLab：在课程根目录，有 formgrader（nbgrader 的教师工具）
#   make test   —— 再装好测试、JupyterHub 和网站的工具（requirements-dev.txt），跑全部测试（CI 也用它：.ci/run）
#   make site   —— 静态网站：notebook 存下的输出和 docs/ 的指南做成网页，放在 _site/（离线可读、可搜索；只在课程环境上加装
#                  requirements-site.txt）
#   make hub    —— 在本机起一个试用的 JupyterHub（要 root；只听 127.0.0.1；make hub-clean 删掉它建的用户；见 docs/jupyterhub.md）
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_STUDENT := $(VENV)/.installed-student
STAMP  := $(VENV)/.installed
STAMP_SITE := $(VENV)/.installed-site
export PYTHONPATH := $(CURDIR)
# nbgrader 要在 PATH 上找到 venv 里的 alembic 等命令
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# 小模型在 CPU 上单线程更快，也避免两个测试进程抢同一个核
export OMP_NUM_THREADS ?= 1

.PHONY: setup setup-student site system-deps hub-deps hub hub-clean lab lab-ta update test test-fast nbval notebooks artifact sweep-report release bench grade grade-demo clean-student-data stamp-badges

setup-student: $(STAMP_STUDENT)
setup: $(STAMP)

# pip 装包时不编译 .pyc（它一个文件一个文件地编译，约 1.1 万个文件、单核约 1 分钟）。装好之后 lib.tools.warm_bytecode
# 在两个进程里同时导入课程用到的包，Python 自己把导入到的模块编译、写进 __pycache__/（只占 site-packages 源码的
# 一半不到，约 17 秒；全部 compileall 约 35 秒）。没导入到的模块第一次用到时同样写下 .pyc：所以这里不把
# PYTHONDONTWRITEBYTECODE 传给命令（有的环境默认设了它，那样每个进程都要在内存里重新编译一遍）。
unexport PYTHONDONTWRITEBYTECODE

$(STAMP_STUDENT): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements.txt
	$(PY) -m lib.tools.warm_bytecode
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (lecture07)" >/dev/null
	touch $(STAMP_STUDENT)

$(STAMP): $(STAMP_STUDENT) requirements-dev.txt requirements-site.txt deploy/jupyterhub/requirements.txt deploy/jupyterhub/requirements-no-deps.txt
	$(PY) -m pip install -q --no-compile -r requirements-dev.txt
	$(PY) -m pip install -q --no-compile --no-deps -r deploy/jupyterhub/requirements-no-deps.txt
	$(PY) -m lib.tools.warm_bytecode
	touch $(STAMP) $(STAMP_SITE)

# make site 只要课程环境（requirements.txt）加上网站的包（requirements-site.txt），不装测试和 JupyterHub 的包
$(STAMP_SITE): $(STAMP_STUDENT) requirements-site.txt
	$(PY) -m pip install -q --no-compile -r requirements.txt -r requirements-site.txt
	touch $(STAMP_SITE)

# 学生的设置（中文界面、没有新闻弹窗、没有教师工具）和 hub 上学生的服务器是同一份：deploy/jupyterhub/jupyter-config/student/
# （lib/coursework.py 用 JUPYTER_CONFIG_PATH 指向它）。LAB_ARGS 交给 JupyterLab，例如 make lab LAB_ARGS="--no-browser --port=8890"
lab: setup-student
	$(PY) -m lib.check_env
	$(PY) -m lib.coursework lab $(LAB_ARGS)

lab-ta: setup-student
	$(PY) -m lib.check_env
	$(PY) -m lib.coursework lab --ta $(LAB_ARGS)

update: setup-student
	$(PY) -m lib.coursework update $(if $(FORCE),--force)

# 浏览器测试要 Chromium 和一种中文字体（Debian 的 fonts-noto-cjk：没有它，中文都画成方块，手机宽度的版面量的是方块，
# tests/test_site.py 会直接失败并提示运行 make system-deps），评分沙箱要 bubblewrap，PostgreSQL gradebook 的测试
# （tests/test_postgres.py）要 Debian 的 postgresql（只用它的 initdb/postgres，测试在临时目录里自己起一个服务器）：
# 以 root 运行且有 apt 时自动安装；装不上时相应的测试会带着原因跳过或失败（评分退回到无沙箱模式并在 status 里注明）。
SYSTEM_PACKAGES := chromium fonts-noto-cjk bubblewrap postgresql
system-deps:
	@if command -v chromium >/dev/null && command -v bwrap >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		&& fc-list :lang=zh 2>/dev/null | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null) \
		|| echo "警告：没能安装 $(SYSTEM_PACKAGES)，浏览器测试和 PostgreSQL gradebook 的测试将被跳过或失败"; \
	else echo "提示：请安装 $(SYSTEM_PACKAGES)（Debian：apt-get install $(SYSTEM_PACKAGES)）"; fi

# JupyterHub 的代理 configurable-http-proxy（npm 包，装在 .venv/chp/）；没有 npm 时以 root 用 apt 装 nodejs，
# 装完仍没有 npm 才装 npm（NodeSource 的 nodejs 自带 npm，和 Debian 的 npm 包冲突）。
# jupyterhub 本身是 pip 包（deploy/jupyterhub/requirements.txt，由 requirements-dev.txt 引入）。
# 交换服务 ngshare 有自己的 venv（.venv/ngshare/，deploy/jupyterhub/requirements-ngshare.txt 里写了为什么）。
CHP_VERSION := 4.6.3
CHP := $(VENV)/chp/node_modules/.bin/configurable-http-proxy
NGSHARE_VENV := $(VENV)/ngshare
$(NGSHARE_VENV)/.installed: deploy/jupyterhub/requirements-ngshare.txt | $(STAMP_STUDENT)
	test -x $(NGSHARE_VENV)/bin/python || $(PY) -m venv $(NGSHARE_VENV)
	$(NGSHARE_VENV)/bin/python -m pip install -q --no-compile -r deploy/jupyterhub/requirements-ngshare.txt
	touch $@
hub-deps: setup $(NGSHARE_VENV)/.installed
	@if [ -x $(CHP) ]; then :; \
	else \
		if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq || true; \
			command -v node >/dev/null || apt-get install -y -qq --no-install-recommends nodejs >/dev/null || true; \
			command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null || true; fi; \
		if command -v npm >/dev/null; then \
			npm install --prefix $(VENV)/chp --no-audit --no-fund --loglevel=error configurable-http-proxy@$(CHP_VERSION) >/dev/null \
			|| echo "警告：没能安装 configurable-http-proxy，JupyterHub 的测试将被跳过"; \
		else echo "提示：请安装 Node.js 和 npm（Debian：apt-get install nodejs npm），再运行 make hub-deps"; fi; \
	fi

# 在本机起一个试用的 JupyterHub：建 instructor1、student1..3 和评分组，dummy 认证（要 root）。
# 只监听 127.0.0.1；要让别的机器连上：make hub HUB_ARGS=--public（密码是公开的，只在可信网络里用）
hub: setup hub-deps
	$(PY) deploy/jupyterhub/local_hub.py $(HUB_ARGS)

# 试用完：删掉 make hub 新建的用户（连同家目录）、组、/srv/lecture07-try 和 cgroup（已有的用户不动）
hub-clean:
	$(PY) deploy/jupyterhub/local_hub.py --clean $(HUB_ARGS)

# 全部测试：lib 的单元测试、练习的往返、评分流水线、浏览器测试、notebook 的 nbval。
# 两个 pytest 进程并行（CI 有 2 个核，大部分测试单线程）；--dist loadscope 让同一个 notebook、同一个测试文件
# 的测试留在同一个进程里（nbval 按顺序执行一个 notebook 的单元格，模块级的 fixture 只建一次）；
# --no-loadscope-reorder：按 conftest.py 排好的顺序发活，最慢的文件先开始。--durations 打印时间花在哪里。
test: setup system-deps hub-deps
	$(PY) -m lib.check_env --quiet --requirements requirements-dev.txt
	$(PY) -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=25

# 只跑快的：不执行 notebook、不开浏览器
test-fast: setup
	$(PY) -m pytest -m "not slow" tests

# 重新执行 notebooks/ 并保存输出（改了 notebook 或 lib 之后运行，再提交）
notebooks: setup
	CI=true $(PY) -m lib.tools.run_notebooks notebooks/*.ipynb

# 随仓库发布的训练结果：notebook 11 的权重和 10 个种子的读数（artifacts/11_mini_gpt/）、notebook 06、07、08、09、12 的
# 训练结果（artifacts/<notebook>/results.json，张量在旁边的 results.pt；见 lib/shipped.py）。它们按“算出它们的代码”
# 存档（lib/fingerprint.py：注释、文档字符串、排版不算）：改了 lib 里的模型、训练循环、数据生成器，或者 notebook
# 里的训练单元格之后，快速测试（test_shipped_weights_match_the_code、test_the_shipped_sweep_matches_the_code_and_the_shipped_weights、
# test_shipped_results_were_made_with_this_lib）或 nbval（“刚在这台机器上训练完”那一行）会失败，直到运行它，再提交。
# notebook 11 的只在过期时重训（2 核约 25 分钟）；06–12 的每次都重新生成（2 核约 15 分钟），第一遍即使有结论不成立也写完
# 全部结果（--allow-errors），第二遍照常执行、结论不成立就停下：表里的数都来自这台机器，页面文字要重新核对。
# 只重新生成一个 notebook 的结果：make artifact SHIPPED_NOTEBOOKS=notebooks/09_training_details.ipynb
SHIPPED_NOTEBOOKS := notebooks/06_multihead_attention.ipynb notebooks/07_transformer_block.ipynb notebooks/08_architectures.ipynb \
	notebooks/09_training_details.ipynb notebooks/12_modern_transformer.ipynb
artifact: setup
	$(PY) -m lib.experiments || $(PY) -m lib.experiments --write-artifact --write-sweep
	for nb in $(SHIPPED_NOTEBOOKS); do rm -f artifacts/$$(basename $$nb .ipynb)/results.json artifacts/$$(basename $$nb .ipynb)/results.pt; done
	COURSE_WRITE_RESULTS=1 CI=true $(PY) -m lib.tools.run_notebooks --allow-errors --no-write $(SHIPPED_NOTEBOOKS)
	CI=true $(PY) -m lib.tools.run_notebooks $(SHIPPED_NOTEBOOKS) notebooks/11_mini_gpt_vs_rnn.ipynb

# 各页训练结论的汇总（生成 docs/sweep_tables.md）：用随仓库发布的结果执行各页，记下每条结论（几分钟）；
# make sweep-report KERNELS=avx2：换一套 CPU 计算核、每一页都现场重训（像换了一台 CPU；2 核约 1 小时）
sweep-report: setup
	$(PY) -m lib.tools.sweep_report $(if $(KERNELS),--kernels $(KERNELS))

# 静态网站（lib/tools/build_site.py）：notebooks/、练习的学生版和 docs/ 的指南，用存下的输出，不重新执行；输出在 _site/（git 忽略）
site: $(STAMP_SITE)
	$(PY) -m lib.tools.build_site

# 用 nbgrader 从 source/ 重新生成 release/ 和 solutions/
release: setup
	$(PY) -m lib.tools.regenerate

stamp-badges: setup
	$(PY) -m lib.tools.badges --write

bench: setup
	$(PY) tests/benchmarks/bench_mini_gpt.py --full
	$(PY) tests/benchmarks/bench_grading.py

# 助教：先在临时课程里看流水线怎样处理 25 种提交（作弊、死循环、崩溃、丢失元数据……），不碰 gradebook.db
grade-demo: setup
	$(PY) tests/grading_demo.py

# 助教：make grade A=exercises S=downloads/submissions.zip JOBS=2
grade: setup
	$(PY) -m lib.grading grade $(A) --submissions $(S) --jobs $(or $(JOBS),2)

clean-student-data:
	rm -rf submitted autograded feedback gradebook.db grades.csv exports .grading reports
