"""Where and who for the API commands: flags, the environment, named profiles (mode 0600,
XDG_CONFIG_HOME honoured, tokens never printed), the local var/admin.token; shell
completion; the lease key of a ``stream:`` subscription."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tidings.core.config import ImproperConfig, SubscriptionConfig

from .cli_support import cli_env, tidings
from .conftest import ServerProcess, free_port

SECRET = "tid_profile_secret_value_42"


def test_profiles_file_mode_xdg_and_the_token_never_shown(tmp_path: Path) -> None:
    home = tmp_path / "xdg"
    env = cli_env(None, None, home, HOME=str(tmp_path / "home"))
    added = tidings("profile", "add", "prod", "--url", "http://127.0.0.1:1", "--token-stdin", env=env,
                    stdin=f"{SECRET}\n".encode())
    assert added.code == 0, added
    path = home / "tidings" / "profiles.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not (tmp_path / "home" / ".config").exists()  # XDG_CONFIG_HOME, not ~/.config
    assert tidings("profile", "add", "dev", "--url", 'http://x"y', env=env).code == 0
    shown = [tidings(*a, env=env) for a in (("profile", "ls"), ("profile", "show", "prod"), ("profile", "show", "dev"))]
    assert "* prod" in shown[0].out and "  dev" in shown[0].out
    assert "token = (set)" in shown[1].out and "token = (none)" in shown[2].out
    assert all(SECRET not in d.out + d.err for d in [added, *shown])
    assert tidings("profile", "use", "dev", env=env).code == 0
    assert "* dev" in tidings("profile", "ls", env=env).out
    assert tidings("profile", "rm", "dev", env=env).code == 0
    assert tidings("profile", "show", "dev", env=env).code == 2
    assert tidings("profile", "add", "bad name", "--url", "u", env=env).code == 2
    path.chmod(0o644)
    assert "readable by others" in tidings("profile", "ls", env=env).err


def test_which_url_and_token_win(server: ServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "xdg"
    env = cli_env(None, None, home)
    good = server.admin_token
    stdin = f"{good}\n".encode()
    assert tidings("profile", "add", "local", "--url", server.url, "--token-stdin", env=env, stdin=stdin).code == 0
    assert tidings("profile", "add", "nowhere", "--url", f"http://127.0.0.1:{free_port()}", env=env).code == 0
    # The default profile (the first added) gives url and token.
    assert tidings("ls", "publications", env=env).code == 0
    # The environment overrides the default profile, an explicit --profile the environment.
    bad = {**env, "TIDINGS_TOKEN": "tid_wrong_token_123456"}
    assert tidings("ls", "publications", env=bad).code == 2
    assert tidings("ls", "publications", "--profile", "local", env=bad).code == 0
    assert tidings("ls", "publications", "--profile", "local", "--token", "tid_wrong_token_123456",
                   env=env).code == 2
    nowhere = tidings("ls", "publications", "--profile", "nowhere", "--token", good, env=env)
    assert nowhere.code == 2 and "unreachable" in nowhere.err
    missing = tidings("ls", "publications", "--profile", "absent", env=env)
    assert missing.code == 2 and "profile add" in missing.err and len(missing.err_lines) == 1
    for done in (nowhere, missing):
        assert good not in done.out + done.err


def test_the_local_servers_admin_token_is_found_beside_it(server: ServerProcess, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "var").symlink_to(server.data_dir)
    env = cli_env(server.url, None, tmp_path / "xdg")
    assert tidings("ls", "publications", env=env, cwd=here).code == 0
    lost = tidings("ls", "publications", env=env, cwd=tmp_path)
    assert lost.code == 2 and "no token" in lost.err


def test_bash_completion_follows_the_parser(tmp_path: Path) -> None:
    env = cli_env(None, None, tmp_path)
    script = tmp_path / "tidings.bash"
    script.write_text(tidings("completion", "bash", env=env).out)

    def complete(*words: str) -> set[str]:
        line = " ".join(f"'{w}'" for w in words)
        out = subprocess.run(
            ["bash", "-c", f'source {script}; COMP_WORDS=(tidings {line}); COMP_CWORD={len(words)}; _tidings; '
                           'printf "%s\\n" "${COMPREPLY[@]}"'],
            capture_output=True, text=True, check=True,
        ).stdout
        return set(out.split())

    assert {"publish", "tail", "ls", "stats", "profile", "completion"} <= complete("")
    assert complete("ls", "p") == {"publications", "principals"}
    assert complete("tail", "ns", "--f") == {"--from", "--filter"}
    assert complete("profile", "") == {"add", "ls", "show", "use", "rm", "-h", "--help"} - {"-h"}
    zsh = tidings("completion", "zsh", env=env).out
    assert zsh.startswith("#compdef tidings") and "bashcompinit" in zsh and "_tidings_words" in zsh
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-c", f"source <(cat <<'EOF'\n{zsh}\nEOF\n)"], check=True)


@pytest.mark.parametrize("value, ok", [(1, True), (86_400_000, True), (0, False), (86_400_001, False)])
def test_lease_bounds(value: int, ok: bool) -> None:
    pairs = [("tidings:subscription:leaseMs", {"Nat": value})]
    if ok:
        assert SubscriptionConfig.read(pairs).lease_s == value / 1000
    else:
        with pytest.raises(ImproperConfig):
            SubscriptionConfig.read(pairs)

