"""The keyring: a key file made private and kept, keys from the environment, rotation
without downtime, and messages that say what is wrong without showing a key."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from trainfleet.vault.keys import KEY_VARIABLE, Keyring, VaultError, rotate_key_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_key_file_is_made_private_on_first_use_and_kept(tmp_path: Path) -> None:
    first = Keyring.load(tmp_path, {})
    key_file = tmp_path / "secret.key"
    assert _mode(key_file) == 0o600
    token = first.encrypt(b"s3cret")
    again = Keyring.load(tmp_path, {})
    assert again.decrypt(token) == b"s3cret"
    assert [p.name for p in tmp_path.iterdir()] == ["secret.key"]  # no temporary left


def test_processes_making_the_key_file_at_once_share_one_key(tmp_path: Path) -> None:
    rings: list[Keyring] = []
    threads = [
        threading.Thread(target=lambda: rings.append(Keyring.load(tmp_path, {}))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    token = rings[0].encrypt(b"v")
    assert all(ring.decrypt(token) == b"v" for ring in rings)
    assert len((tmp_path / "secret.key").read_bytes().split()) == 1


def test_keys_from_the_environment_win_over_the_key_file(tmp_path: Path) -> None:
    key = Fernet.generate_key()
    ring = Keyring.load(tmp_path, {KEY_VARIABLE: key.decode()})
    assert Fernet(key).decrypt(ring.encrypt(b"x")) == b"x"
    assert not (tmp_path / "secret.key").exists()


def test_rotation_through_the_environment(tmp_path: Path) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    before = Keyring.load(tmp_path, {KEY_VARIABLE: old})
    stored = before.encrypt(b"value")

    during = Keyring.load(tmp_path, {KEY_VARIABLE: f" {new} , {old} "})
    assert during.decrypt(stored) == b"value"
    assert during.needs_rotation(stored)
    rotated = during.rotate(stored)
    assert not during.needs_rotation(rotated)
    assert not during.needs_rotation(during.encrypt(b"fresh"))

    after = Keyring.load(tmp_path, {KEY_VARIABLE: new})
    assert after.decrypt(rotated) == b"value"
    with pytest.raises(VaultError):
        after.decrypt(stored)


def test_rotation_of_the_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    stored = Keyring.load(tmp_path, {}).encrypt(b"value")
    old_key = key_file.read_bytes().strip()

    rotate_key_file(key_file)
    assert _mode(key_file) == 0o600
    keys = key_file.read_bytes().split()
    assert len(keys) == 2 and keys[1] == old_key
    during = Keyring.load(tmp_path, {})
    assert during.decrypt(stored) == b"value" and during.needs_rotation(stored)
    rotated = during.rotate(stored)

    key_file.write_bytes(keys[0] + b"\n")  # the old key dropped
    after = Keyring.load(tmp_path, {})
    assert after.decrypt(rotated) == b"value"
    with pytest.raises(VaultError, match="replaced without keeping the old key"):
        after.decrypt(stored)


def test_a_wrong_key_says_what_happened(tmp_path: Path) -> None:
    stored = Keyring.load(tmp_path, {KEY_VARIABLE: Fernet.generate_key().decode()}).encrypt(b"v")
    other = Keyring.load(tmp_path, {KEY_VARIABLE: Fernet.generate_key().decode()})
    with pytest.raises(VaultError) as raised:
        other.decrypt(stored)
    message = str(raised.value)
    assert "cannot be decrypted with the keys given" in message
    assert f"was {KEY_VARIABLE} changed without keeping the old key?" in message
    with pytest.raises(VaultError, match="cannot be decrypted"):
        other.rotate(stored)
    with pytest.raises(VaultError, match="cannot be decrypted"):
        other.decrypt(b"not a token")


@pytest.mark.parametrize(
    "value",
    ["not-a-key-at-all", "c2hvcnQ=", Fernet.generate_key().decode()[:-4] + "!!!="],
    ids=["words", "too-short", "bad-characters"],  # the same on every pytest-xdist worker
)
def test_a_bad_key_in_the_environment_is_named_never_shown(tmp_path: Path, value: str) -> None:
    good = Fernet.generate_key().decode()
    with pytest.raises(VaultError) as raised:
        Keyring.load(tmp_path, {KEY_VARIABLE: f"{good},{value}"})
    message = str(raised.value)
    assert message.startswith(f"{KEY_VARIABLE}: key 2 is not a Fernet key")
    assert value not in message and good not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_bad_line_in_the_key_file_is_named_never_shown(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_text(f"{Fernet.generate_key().decode()}\n\nnot-a-key-xyz\n")
    with pytest.raises(VaultError) as raised:
        Keyring.load(tmp_path, {})
    assert str(raised.value).startswith(f"{key_file}: line 2 is not a Fernet key")
    assert "not-a-key-xyz" not in str(raised.value)


def test_an_empty_key_file_holds_no_key(tmp_path: Path) -> None:
    (tmp_path / "secret.key").write_text("\n")
    with pytest.raises(VaultError, match="holds no key"):
        Keyring.load(tmp_path, {})


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    Keyring.load(tmp_path, {KEY_VARIABLE: " "})
    assert (tmp_path / "secret.key").exists()
