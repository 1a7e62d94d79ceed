"""Deploy-ready settings (issue 18): a deployment is told by ALLOWED_HOSTS,
turns the HTTPS settings on, refuses the development SECRET_KEY, and
``check --deploy`` is clean with the README's production environment; with
nothing set the settings stay those of plain HTTP on a developer's machine.
The systemd units are checked with ``systemd-analyze verify`` where it exists.

Settings are read once per process, so each case runs ``manage.py`` in a
subprocess with its own environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from config.deploy import admins_setting, https_origins, is_deployment, is_loopback, proxy_ssl_header

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"

SHOW = """
import django, json
django.setup()
from django.conf import settings as s
print(json.dumps({name: getattr(s, name) for name in (
    "DEPLOYMENT", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE", "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS")}))
"""


def _env(**values: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTLAB_", "DJANGO_", "CELERY_", "SECURE_"))
    }
    for name in ("SECRET_KEY", "ALLOWED_HOSTS", "DEBUG", "CSRF_TRUSTED_ORIGINS", "SESSION_COOKIE_SECURE",
                 "CSRF_COOKIE_SECURE", "REDIS_URL"):  # fmt: skip
        base.pop(name, None)
    return {**base, "DJANGO_SETTINGS_MODULE": "config.settings", **values}


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=120)


def readme_production_env() -> dict[str, str]:
    """The ``/etc/agentlab/env`` block of docs/production.md."""
    text = (ROOT / "docs" / "production.md").read_text()
    block = re.search(r"```sh\n# /etc/agentlab/env\n(.*?)```", text, re.S)
    assert block, "the production environment block of docs/production.md is missing"
    pairs = (line.split("=", 1) for line in block.group(1).splitlines() if "=" in line)
    # as systemd's EnvironmentFile reads it: surrounding double quotes stripped
    return {name.strip(): _unquoted(value.strip()) for name, value in pairs}


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def readme_env_block() -> str:
    text = (ROOT / "docs" / "production.md").read_text()
    block = re.search(r"```sh\n(# /etc/agentlab/env\n.*?)```", text, re.S)
    assert block
    return block.group(1)


@pytest.mark.skipif(shutil.which("dash") is None, reason="dash is not installed")
def test_the_cron_line_reads_the_documented_env_file_under_dash(tmp_path):
    """Before: ``ADMINS=Ops <ops@example.com>`` was a syntax error in dash,
    so neither run_eval nor the ``|| mail`` alert of the cron line ran."""
    env_file = tmp_path / "env"
    env_file.write_text(readme_env_block())
    cron = (ROOT / "docs" / "comparing.md").read_text()
    line = next(x for x in cron.splitlines() if x.startswith("30 2 * * *"))
    prefix = line.split("cd /srv/agentlab && ", 1)[1].split(".venv/bin/python", 1)[0]
    assert prefix == "set -a && . /etc/agentlab/env && set +a && "
    names = ("ADMINS", "EMAIL_URL", "SECRET_KEY")
    show = f"import json, os; print(json.dumps({{k: os.environ[k] for k in {json.dumps(names)}}}))"
    script = prefix.replace("/etc/agentlab/env", str(env_file)) + f"{sys.executable} -c '{show}'"
    out = subprocess.run(["dash", "-c", script], capture_output=True, text=True, timeout=30, env={})
    assert out.returncode == 0, out.stderr
    expected = readme_production_env()
    assert json.loads(out.stdout) == {k: expected[k] for k in names}
    assert expected["ADMINS"] == "Ops <ops@example.com>"
    assert admins_setting(expected["ADMINS"].split(",")) == [("Ops", "ops@example.com")]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("127.0.0.1", True), ("127.0.1.1", True), ("[::1]", True), ("app.localhost", True),
     ("testserver", True), ("agentlab.example.com", False), (".example.com", False), ("10.0.0.5", False),
     ("*", False)],
)  # fmt: skip
def test_loopback_hosts_are_told_from_deployment_hosts(host, loopback):
    assert is_loopback(host) is loopback
    assert is_deployment(["localhost", host]) is (not loopback)


def test_https_origins_and_the_proxy_header_from_their_settings():
    assert https_origins(["localhost", "agentlab.example.com", ".example.org", "*"]) == [
        "https://agentlab.example.com",
        "https://*.example.org",
    ]
    assert proxy_ssl_header("HTTP_X_FORWARDED_PROTO, https") == ("HTTP_X_FORWARDED_PROTO", "https")
    assert proxy_ssl_header("") is None
    with pytest.raises(ValueError, match="SECURE_PROXY_SSL_HEADER must be"):
        proxy_ssl_header("X-Forwarded-Proto")


def test_with_nothing_set_the_settings_are_plain_http():
    out = _run([sys.executable, "-c", SHOW])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == (
        '{"DEPLOYMENT": false, "SECURE_SSL_REDIRECT": false, "SECURE_HSTS_SECONDS": 0, '
        '"SESSION_COOKIE_SECURE": false, "CSRF_COOKIE_SECURE": false, "SECURE_PROXY_SSL_HEADER": null, '
        '"CSRF_TRUSTED_ORIGINS": []}'
    )


def test_a_deployment_turns_https_on_and_each_setting_can_be_turned_off():
    key = "k" * 20 + "-a-long-random-production-key-0123456789"
    on = _run([sys.executable, "-c", SHOW], ALLOWED_HOSTS="agentlab.example.com", SECRET_KEY=key)
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip().splitlines()[-1] == (
        '{"DEPLOYMENT": true, "SECURE_SSL_REDIRECT": true, "SECURE_HSTS_SECONDS": 31536000, '
        '"SESSION_COOKIE_SECURE": true, "CSRF_COOKIE_SECURE": true, '
        '"SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"], '
        '"CSRF_TRUSTED_ORIGINS": ["https://agentlab.example.com"]}'
    )
    off = _run(
        [sys.executable, "-c", SHOW],
        ALLOWED_HOSTS="agentlab.example.com",
        SECRET_KEY=key,
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="0",
        SECURE_PROXY_SSL_HEADER="",
    )
    assert off.returncode == 0, off.stderr
    assert '"SECURE_SSL_REDIRECT": false, "SECURE_HSTS_SECONDS": 0' in off.stdout
    assert '"SECURE_PROXY_SSL_HEADER": null' in off.stdout


def test_a_deployment_refuses_to_start_with_the_development_secret_key():
    out = _run([sys.executable, "manage.py", "check"], ALLOWED_HOSTS="agentlab.example.com")
    assert out.returncode == 2
    assert out.stderr.startswith(
        "configuration error: ALLOWED_HOSTS names agentlab.example.com, a deployment"
    )
    assert "SECRET_KEY is the development key" in out.stderr


@pytest.mark.parametrize("hosts", ["agentlab.example.com", "localhost"])
def test_an_empty_secret_key_is_refused_at_start(hosts):
    """Before: with a public host, ``check --deploy`` passed (W009 only) and
    the server then answered 500 to every request."""
    for command in (["check", "--deploy"], ["migrate", "--check"]):
        out = _run([sys.executable, "manage.py", *command], ALLOWED_HOSTS=hosts, SECRET_KEY=" ")
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("configuration error: SECRET_KEY is set but empty"), out.stderr
        assert "Traceback" not in out.stderr


def test_check_deploy_is_clean_with_the_readme_production_environment():
    env = readme_production_env()
    assert env["ALLOWED_HOSTS"] == "agentlab.example.com"
    out = _run([sys.executable, "manage.py", "check", "--deploy"], **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "System check identified no issues (0 silenced)."
    assert out.stderr.strip() == ""


def test_the_systemd_units_restart_always_and_verify(tmp_path):
    units = sorted(p.name for p in UNITS.iterdir())
    assert units == [
        "agentlab-beat.service",
        "agentlab-daphne.service",
        "agentlab-worker.service",
        "agentlab.target",
    ]
    for name in units:
        if name.endswith(".service"):
            assert "\nRestart=always\n" in (UNITS / name).read_text(), name
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit files were not verified")
    # verify checks that ExecStart's program exists: point the units at this
    # checkout (the README tells a deployment to do the same)
    for name in units:
        text = (
            (UNITS / name).read_text().replace("/srv/agentlab/.venv/bin/", f"{Path(sys.executable).parent}/")
        )
        (tmp_path / name).write_text(text.replace("/srv/agentlab", str(ROOT)))
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in units)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 0 and problems == [], problems


def test_admins_are_read_as_names_and_addresses_and_a_bad_entry_is_named():
    assert admins_setting(["Ops Team <ops@example.com>", " dev@example.com ", ""]) == [
        ("Ops Team", "ops@example.com"),
        ("dev", "dev@example.com"),
    ]
    with pytest.raises(ValueError, match="ADMINS: 'ops' is not an e-mail address"):
        admins_setting(["ops"])
