"""TLS to ZooKeeper against a real server on a `secureClientPort` (Netty), with certificates
this test makes: a CA, a server certificate that names only `localhost`, a client
certificate (the server requires one), and a second CA that signed nothing of the server's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from integration.harness import DaemonProcess, wait_until
from tools.zkserver import ZkServer, free_port

Start = Callable[..., DaemonProcess]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(cwd: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=zksched test {name}",
        cwd=cwd,
    )  # fmt: skip


def make_cert(cwd: Path, name: str, ca: str, subject: str, extensions: str) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", f"/CN={subject}",
        cwd=cwd,
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


@dataclass
class TlsServer:
    port: int
    certs: Path

    def args(self, host: str = "localhost", ca: str = "ca", client: bool = True) -> list[str]:
        args = ["--zk", f"{host}:{self.port}", "--tls", "--tls-ca", str(self.certs / f"{ca}.pem")]
        if client:
            args += [
                "--tls-cert",
                str(self.certs / "client.pem"),
                "--tls-key",
                str(self.certs / "client.key"),
            ]
        return args


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """One TLS server for the module: starting ZooKeeper is the slow part."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS test needs the openssl command to make its certificates")
    tmp_path = tmp_path_factory.mktemp("tls")
    certs = tmp_path / "certs"
    certs.mkdir()
    make_ca(certs, "ca")
    make_ca(certs, "other-ca")
    usage = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
    make_cert(
        certs, "server", "ca", "localhost",
        usage + "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )  # fmt: skip
    make_cert(certs, "client", "ca", "zksched-client", usage + "extendedKeyUsage=clientAuth\n")
    # ZooKeeper reads PEM stores: the key and its certificate in one file; the CA as trust.
    keystore = certs / "server-keystore.pem"
    keystore.write_text((certs / "server.key").read_text() + (certs / "server.pem").read_text())
    port = free_port()
    server = ZkServer(
        tmp_path / "zk-tls",
        extra_config={
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "secureClientPort": str(port),
            "secureClientPortAddress": "127.0.0.1",
            "ssl.keyStore.location": str(keystore),
            "ssl.keyStore.type": "PEM",
            "ssl.trustStore.location": str(certs / "ca.pem"),
            "ssl.trustStore.type": "PEM",
            "ssl.clientAuth": "need",
        },
    )
    server.start()
    try:
        server.wait_serving(60)
        yield TlsServer(port, certs)
    finally:
        server.stop(kill=True)


def zksched(*args: str, connect_timeout: float = 2) -> subprocess.CompletedProcess[str]:
    # Refusals are expected quickly; a success may wait out a busy machine's handshake.
    return subprocess.run(
        [sys.executable, "-m", "zksched", "--connect-timeout", str(connect_timeout), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_a_daemon_and_the_cli_work_over_tls_with_the_right_ca(
    tls_server: TlsServer, daemons: Start, client_id: str
) -> None:
    args = tls_server.args()
    env = {"ZKSCHED_TLS": "true", "ZKSCHED_TLS_CA": args[4]}
    env |= {"ZKSCHED_TLS_CERT": args[6], "ZKSCHED_TLS_KEY": args[8]}
    daemon = daemons(zk_hosts=args[1], env=env)
    wait_until(lambda: daemon.last_members(), 90, what="the member joined over TLS")
    done = zksched(*args, "--client-id", client_id, "members", "--json", connect_timeout=30)
    assert done.returncode == 0, done.stderr
    assert [m["member_id"] for m in json.loads(done.stdout)] == [daemon.member_id]


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("a CA that did not sign the server's certificate", {"ca": "other-ca"}),
        ("an address the certificate does not name", {"host": "127.0.0.1"}),
        ("no client certificate, which the server requires", {"client": False}),
    ],
)
def test_tls_refuses(tls_server: TlsServer, why: str, kwargs: dict[str, object]) -> None:
    done = zksched(*tls_server.args(**kwargs), "members")  # type: ignore[arg-type]
    assert done.returncode == 3, (why, done.stdout, done.stderr)
    assert done.stderr.startswith("zksched: cannot reach ZooKeeper at "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_the_hostname_check_is_what_refuses_the_bare_address(tls_server: TlsServer) -> None:
    # The same address with hostname checking off connects: the refusal above was the name.
    done = zksched(
        *tls_server.args(host="127.0.0.1"), "--tls-no-check-hostname", "members", connect_timeout=30
    )
    assert done.returncode == 0, done.stderr


def test_plain_text_to_the_secure_port_is_refused(tls_server: TlsServer) -> None:
    done = zksched("--zk", f"127.0.0.1:{tls_server.port}", "members")
    assert done.returncode == 3, done.stderr
