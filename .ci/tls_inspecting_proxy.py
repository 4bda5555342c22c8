"""A real TLS-inspecting proxy: mitmproxy (from PyPI, in a throwaway venv) in front of nginx (Debian's)
serving HTTPS, re-signing with a CA made here whose basicConstraints is NOT critical, as the CAs of
Zscaler, Netskope and many corporate PKIs are. HTTPS_PROXY points at it and its CA is in SSL_CERT_FILE
(then REQUESTS_CA_BUNDLE): list_datasets, query and a download work with the default context; a
wrong name and an unknown CA are still refused; plain urllib.request.urlopen fails under 3.13+.
Run by .ci/tls_probe.py under each Python: 3.11 to 3.13 here, 3.14 and 3.15 in the chroot of
.ci/newer_pythons.sh (when it was built).

    python3 .ci/tls_inspecting_proxy.py

Where mitmproxy, nginx or openssl cannot be had, a line "SKIPPED: why" (.ci/run counts it), exit
status 0; so for each Python that is not there. Exit status 1 when a check fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from object_store_checks import free_port, started  # beside this file
from real_proxy_checks import apt_install

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("TMPDIR") or "/tmp") / "dataset-client-ci-mitmproxy"
MITMPROXY = "mitmproxy==11.0.2"  # the last release installable on Python 3.11 (python3 here)

NGINX_CONF = """\
daemon off;
master_process off;
user root;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log;
events {{ worker_connections 64; }}
http {{
    access_log {dir}/nginx-access.log;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert}; ssl_certificate_key {cert};
        location = /api/datasets {{ default_type application/json; return 200 '["nginx"]'; }}
        location = /api/query {{ default_type application/json; return 200 '{{"columns": ["x"], "rows": [[1]]}}'; }}
        location /api/files/ {{ alias {dir}/files/; }}
    }}
}}
"""

CA_CONFIG = """\
[req]
distinguished_name = dn
x509_extensions = ca
prompt = no
[dn]
CN = inspecting proxy test CA (basicConstraints not critical)
[ca]
basicConstraints = CA:TRUE
keyUsage = keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""


def skip(why: str) -> int:
    print(f"SKIPPED: TLS-inspecting proxy checks: {why}")
    return 0


def openssl(directory: Path, command: str) -> None:
    subprocess.run(
        ["openssl", *command.split()], cwd=directory, check=True, capture_output=True, timeout=60
    )


def make_certificates(directory: Path) -> None:
    """mitmproxy's CA (ca.pem; key and certificate in mitmproxy-ca.pem) and a certificate it signed for
    another name (wrong-name.pem), which the proxy shows for localhost."""
    (directory / "ca.cnf").write_text(CA_CONFIG)
    (directory / "leaf.ext").write_text(
        "subjectAltName = DNS:wrong-name.test\nauthorityKeyIdentifier = keyid\n"
    )
    key = "-newkey rsa:2048 -nodes -keyout"
    openssl(directory, f"req -x509 -config ca.cnf {key} ca.key -out ca.pem -days 3650")
    openssl(directory, f"req -new {key} leaf.key -subj /CN=wrong-name.test -out leaf.csr")
    sign = "-CA ca.pem -CAkey ca.key -set_serial 9 -days 3650 -extfile leaf.ext"
    openssl(directory, f"x509 -req -in leaf.csr {sign} -out leaf.crt")
    confdir = directory / "mitmproxy"
    confdir.mkdir()
    (confdir / "mitmproxy-ca.pem").write_text(
        (directory / "ca.key").read_text() + (directory / "ca.pem").read_text()
    )
    (directory / "wrong-name.pem").write_text(
        (directory / "leaf.key").read_text() + (directory / "leaf.crt").read_text()
    )


def tools_missing() -> str | None:
    """Why the check cannot run here, or None; installs nginx (apt, as root) and mitmproxy (PyPI) if missing."""
    if shutil.which("nginx") is None and os.geteuid() == 0:
        apt_install("nginx")
    if shutil.which("nginx") is None:
        return "nginx is not installed (apt-get install nginx, as root)"
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    mitmdump = VENV / "bin" / "mitmdump"
    if not mitmdump.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        pip = [
            str(VENV / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]
        if subprocess.run([*pip, "--timeout", "30", MITMPROXY]).returncode != 0:
            return f"pip could not install {MITMPROXY} (no package index reachable?)"
    return None


def pythons() -> list[str]:
    """python3, then pyenv's 3.12 and 3.13 when there."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [sys.executable]
    for version in ("3.12", "3.13"):
        candidates = sorted(
            root.glob(f"{version}.*/bin/python"), key=lambda path: int(path.parts[-3].split(".")[2])
        )
        if candidates:
            found.append(str(candidates[-1]))
        else:
            print(f"SKIPPED: TLS-inspecting proxy checks on Python {version}: not installed here")
    return found


def run_probes(directory: Path, proxy: str, origin: str, sha256: str) -> int:
    status = 0
    ca = str(directory / "ca.pem")
    for python in pythons():
        status |= subprocess.run(
            [python, str(ROOT / ".ci" / "tls_probe.py"), proxy, origin, ca, sha256]
        ).returncode
    chroot = Path(os.environ.get("TMPDIR") or "/tmp") / "dataset-client-ci-sid"
    if (
        chroot / ".built"
    ).exists():  # 3.14 and 3.15, in newer_pythons.sh's chroot; the CA copied in
        inside = Path("/tmp/dataset-client-tls-probe-ca.pem")
        shutil.copy(ca, chroot / inside.relative_to("/"))
        probe = [".ci/tls_probe.py", proxy, origin, str(inside), sha256]
        status |= subprocess.run(
            ["bash", str(ROOT / ".ci" / "newer_pythons.sh"), "--run", *probe]
        ).returncode
    else:
        print(
            f"SKIPPED: TLS-inspecting proxy checks on Python 3.14 and 3.15: no chroot in {chroot} (newer_pythons.sh)"
        )
    return status


def main() -> int:
    why = tools_missing()
    if why:
        return skip(why)
    with tempfile.TemporaryDirectory(prefix="dataset-client-tls-") as name:
        directory = Path(name)
        make_certificates(directory)
        (directory / "files").mkdir()
        blob = os.urandom(3 * 1024 * 1024 + 17)
        (directory / "files" / "blob.bin").write_bytes(blob)
        nginx_port, proxy_port = free_port(), free_port()
        (directory / "nginx.conf").write_text(
            NGINX_CONF.format(
                dir=directory, port=nginx_port, cert=ROOT / "tests_data" / "server.pem"
            )
        )
        nginx = ["nginx", "-c", str(directory / "nginx.conf"), "-p", str(directory)]
        mitmdump = [
            str(VENV / "bin" / "mitmdump"),
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(proxy_port),
        ]
        mitmdump += [
            "--set",
            f"confdir={directory / 'mitmproxy'}",
            "--certs",
            f"localhost={directory / 'wrong-name.pem'}",
        ]
        mitmdump += [
            "--set",
            f"ssl_verify_upstream_trusted_ca={ROOT / 'tests_data' / 'ca.pem'}",
            "--flow-detail",
            "1",
        ]
        # Certificates forged from the name asked for alone: else the origin's (127.0.0.1 and localhost) would
        # pick the wrong-name one for 127.0.0.1 too.
        mitmdump += ["--set", "upstream_cert=false"]
        with (
            started(nginx, nginx_port, directory / "nginx.out"),
            started(mitmdump, proxy_port, directory / "mitmdump.log"),
        ):
            origin = f"https://127.0.0.1:{nginx_port}/api"
            print(
                f"== mitmproxy on 127.0.0.1:{proxy_port} in front of nginx at {origin}", flush=True
            )
            status = run_probes(
                directory,
                f"http://127.0.0.1:{proxy_port}",
                origin,
                hashlib.sha256(blob).hexdigest(),
            )
        seen = (directory / "mitmdump.log").read_text(errors="replace")
        served = (directory / "nginx-access.log").read_text(errors="replace")
        intercepted = seen.count("/api/datasets") > 0 and served.count('"POST /api/query') > 0
        print(
            f"{'ok' if intercepted else 'FAILED'}: mitmproxy saw the decrypted requests and nginx served them"
        )
        if not intercepted:
            print(seen[-3000:], served[-2000:], sep="\n")
    return 1 if status or not intercepted else 0


if __name__ == "__main__":
    sys.exit(main())
