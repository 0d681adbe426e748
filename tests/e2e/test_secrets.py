"""No secret reaches a file (issue #15): a real run against a loopback OpenAI-compatible server,
with a password in the server URL, a credential-named override, an environment secret echoed
through an innocent-looking override, a query token in a URL with a port, and W&B offline logging; then every file the run wrote,
and its stdout/stderr, is searched for each planted secret."""
import os
import subprocess
import sys

import pytest

from speedbench import redact

from tests.support.openai_loopback import LoopbackServer
from tests.support.sweep_helpers import subprocess_env

URL_PASSWORD = "UrlPassw0rd-9f3k"
OVERRIDE_SECRET = "OverrideAuth-1x9q"
ENV_SECRET = "EnvSecret-4h8w-zz"
QUERY_SECRET = "QueryTok-7m2p-yy"
FLAG_SECRET = "FlagKey-5t6y-uu"  # the value after a credential flag in a list, vLLM's documented --api-key form
# environment secrets under common names, interpolated into config fields with ${oc.env:NAME}
NAMED_ENV = {
    "PGPASSWORD": "PgPassw0rd-31aa", "MYSQL_PWD": "MySqlPwd-72bb", "DB_PASS": "DbPass-93cc", "DB_PWD": "DbPwd-14dd",
    "GITHUB_PAT": "GithubPat-55ee", "PASSPHRASE": "Phrase-66ff-gg", "APITOKEN": "ApiTok-77hh-ii",
    "CLIENTSECRET": "ClientSec-88jj", "DATABASE_URL": "postgres://app:DbUrlPw-99kk@db.example:5432/app",
}
SECRETS = (URL_PASSWORD, OVERRIDE_SECRET, ENV_SECRET, QUERY_SECRET, FLAG_SECRET, *NAMED_ENV.values(), "DbUrlPw-99kk")


@pytest.mark.slow
def test_planted_secrets_reach_no_file_and_no_output(tmp_path):
    with LoopbackServer() as server:
        args = [
            sys.executable, "-m", "speedbench.cli", "run", f"results_dir={tmp_path / 'results'}", "run_id=secrets",
            "backend=openai", "target.path=random:tiny-target", "drafter=ngram", "dataset=smoke",
            "dataset.categories=[coding]", "max_new_tokens=6", "warmup_batches=0", "logger=wandb",
            f"backend.options.base_url={server.url('ok', 'alice:' + URL_PASSWORD)}",
            f"backend.options.baseline_url={server.url('http500', 'alice:' + URL_PASSWORD)}",  # errors quote the URL
            "backend.options.model=tiny", "backend.options.metrics=false",
            f"+backend.options.extra_body.endpoint_auth={OVERRIDE_SECRET}",
            f"+backend.options.extra_body.note={ENV_SECRET}",
            f"+backend.options.extra_body.callback='http://127.0.0.1:9/cb?access_token={QUERY_SECRET}'",  # port, then query
            f"+backend.options.extra_body.argv=[--model,tiny,--api-key,{FLAG_SECRET}]",
            *(f"+backend.options.extra_body.field{i}=${{oc.env:{name}}}" for i, name in enumerate(NAMED_ENV)),
        ]
        env = subprocess_env(MY_SERVICE_TOKEN=ENV_SECRET, WANDB_MODE="offline", WANDB_SILENT="true", **NAMED_ENV)
        proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
        sent = server.requests
    assert proc.returncode == 1, proc.stderr[-3000:]  # the baseline server fails every request: a failed cell
    assert any(r["body"].get("endpoint_auth") == OVERRIDE_SECRET for r in sent)  # the secrets were really used
    assert any(r["body"].get("field0") == NAMED_ENV["PGPASSWORD"] for r in sent)  # ${oc.env:...} resolved
    root = tmp_path / "results" / "secrets"
    files = [p for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"provenance.json", "cells.csv", "cells.jsonl", "overrides.yaml", "config.yaml"} <= names, names
    assert any(p.suffix == ".wandb" for p in files) and any(p.suffix == ".log" for p in files)
    assert any("HTTP 500" in p.read_text(errors="ignore") for p in files if p.suffix == ".json")
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} in {path.relative_to(root)}"
    for secret in SECRETS:
        assert secret not in proc.stdout and secret not in proc.stderr


@pytest.mark.parametrize("text, secret", [
    ("http://bob:hunter2hunter2@host:8000/v1", "hunter2hunter2"),
    ("https://host/v1?api_key=qk-12345678&x=1", "qk-12345678"),
    ("https://host/v1?access_token=tok-abcdefg", "tok-abcdefg"),
    ("http://127.0.0.1:8000/v1?api_key=qk-12345678", "qk-12345678"),  # a port before the query
    ("http://bob:pw@127.0.0.1:41234/ok/v1?access_token=AuditQueryTok-55", "AuditQueryTok-55"),
    ("base_url: http://host:8000/v1?x=1&token=tok-9876543", "tok-9876543"),
    ("+backend.options.extra_body.endpoint_auth=abc12345", "abc12345"),
    ("endpoint_auth: abc12345", "abc12345"),
    ("Authorization: Bearer abcdef123456", "abcdef123456"),
    ("key sk-abcdefghijklmnop used", "sk-abcdefghijklmnop"),
])
def test_redact_text_covers_every_kind(text, secret):
    assert secret not in redact.redact_text(text)


@pytest.mark.parametrize("text, secret", [
    ("python -m vllm.entrypoints.openai.api_server --api-key FlagKey-1a2b --port 8000", "FlagKey-1a2b"),
    ("- backend.options.server_args=[--api-key,FlagKey-1a2b]", "FlagKey-1a2b"),
    ("server_args:\n- --api-key\n- FlagKey-1a2b\n", "FlagKey-1a2b"),
    ("--hf-token=hf-FlagKey-1a2b --token 'tok123'", "tok123"),
])
def test_a_value_after_a_credential_flag_is_a_secret_in_any_text(text, secret):
    out = redact.redact_text(text)
    assert secret not in out and redact.REDACTED in out


def test_a_value_after_a_credential_flag_is_a_secret_in_a_list():
    argv = ["--model", "m", "--api-key", "k3y", "--token", "t", "--max-num-batched-tokens", "2048", "--api-key-file", "f"]
    assert redact.redact(argv) == ["--model", "m", "--api-key", redact.REDACTED, "--token", redact.REDACTED,
                                   "--max-num-batched-tokens", "2048", "--api-key-file", "f"]
    redact.collect({"server_args": ["--api-key", "CollectedKey-77"]})  # remembered: redacted wherever it appears
    assert "CollectedKey-77" not in redact.redact_text("vLLM: non-default args: {'api_key': ['CollectedKey-77']}")


def test_redact_keeps_ordinary_settings():
    cfg = {"max_new_tokens": 64, "num_speculative_tokens": 4, "tokenizer": "x", "api_key_env": "OPENAI_API_KEY",
           "prompt_tokens": 10, "endpoint_auth": "s3cret-value", "nested": {"password": "pw-123456"}}
    out = redact.redact(cfg)
    assert out["max_new_tokens"] == 64 and out["num_speculative_tokens"] == 4 and out["tokenizer"] == "x"
    assert out["api_key_env"] == "OPENAI_API_KEY" and out["prompt_tokens"] == 10
    assert out["endpoint_auth"] == out["nested"]["password"] == redact.REDACTED


def test_measurements_named_after_tokens_are_not_secrets():
    """Result fields and settings whose names contain a credential word as a unit or a subject."""
    row = {"token_match_rate": 0.97, "prompt_token_limit": 131071, "chars_per_token": 3.5,
           "first_token_timeout_s": 30.0, "prefill_ms_per_token": 0.2, "hf_token": "hf-abcdefgh", "auth_header": "x-123456"}
    out = redact.redact(row)
    for name in ("token_match_rate", "prompt_token_limit", "chars_per_token", "first_token_timeout_s", "prefill_ms_per_token"):
        assert out[name] == row[name], name
    assert out["hf_token"] == out["auth_header"] == redact.REDACTED
    assert redact.redact({"auth": 123456789})["auth"] == redact.REDACTED  # an integer credential still is one


def test_environment_secrets_are_redacted_anywhere(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_SECRET", "value-from-env-77")
    assert "value-from-env-77" not in redact.redact_text("echo value-from-env-77 here")
    assert os.environ["SOME_SERVICE_SECRET"] == "value-from-env-77"


@pytest.mark.parametrize("name", [*NAMED_ENV, "pgpassword", "api-token", "OPENAI_APIKEY", "my.clientsecret"])
def test_common_secret_names_follow_the_rule(name):
    assert redact.is_secret_name(name)


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "token_match_rate", "prompt_token_limit", "chars_per_token", "tokenizer",
                                  "base_url", "max_new_tokens", "bypass", "compass", "monkey", "why_pass"])
def test_ordinary_names_are_not_secret_names(name):
    assert not redact.is_secret_name(name)


def test_named_environment_secrets_are_redacted_in_any_text(monkeypatch):
    for name, value in NAMED_ENV.items():
        monkeypatch.setenv(name, value)
    text = redact.redact_text(" ".join(f"note={v}" for v in NAMED_ENV.values()))
    assert not any(v in text for v in NAMED_ENV.values()) and "DbUrlPw-99kk" not in text
    monkeypatch.setenv("PWD", "/home/someone/work")
    assert redact.redact_text("cwd /home/someone/work") == "cwd /home/someone/work"  # the working directory is kept


def test_redaction_cannot_be_skipped_by_a_failing_write(tmp_path):
    """A full disk at start: the redacted copy of .hydra/*.yaml cannot be written (here a real
    write failure, EFBIG, from a file-size limit); the secret must still not stay on disk."""
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "config.yaml").write_text("x: 1\n" * 2000 + f"api_key: {OVERRIDE_SECRET}\n")  # over the limit
    (hydra / "overrides.yaml").write_text(f"- +backend.options.api_key={OVERRIDE_SECRET}\n")  # under it
    code = ("import resource, signal, sys; from pathlib import Path; from speedbench import redact; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "redact.redact_tree(Path(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(hydra)], env=subprocess_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    left = sorted(p.name for p in hydra.iterdir())
    assert not any(name.endswith(".redact.tmp") for name in left), left
    assert all(OVERRIDE_SECRET not in p.read_text() for p in hydra.iterdir())
    assert "<redacted>" in (hydra / "overrides.yaml").read_text()  # what could be rewritten was


def test_hydra_error_line_of_a_failed_job_is_redacted(capsys):
    """Hydra prints "Error executing job with overrides: [...]" for any uncaught exception in a
    job, on sys.stderr, which `speedbench run` holds and passes on redacted."""
    from hydra.core.utils import JobReturn, JobStatus

    from speedbench.console import HeldStderr

    held = HeldStderr(sys.stderr)
    held.release()
    job = JobReturn(overrides=[f"+backend.options.api_key={OVERRIDE_SECRET}", "x=http://u:" + URL_PASSWORD + "@h/v1"],
                    status=JobStatus.FAILED)
    job.return_value = RuntimeError("boom")
    real, sys.stderr = sys.stderr, held
    try:
        with pytest.raises(RuntimeError):
            job.return_value
    finally:
        sys.stderr = real
    err = capsys.readouterr().err
    assert "Error executing job with overrides" in err
    assert OVERRIDE_SECRET not in err and URL_PASSWORD not in err
