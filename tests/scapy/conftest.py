import pytest

from nvhelpers import netveil_bin


@pytest.fixture(scope="session", autouse=True)
def _netveil_binary():
    b = netveil_bin()
    if not b.is_file():
        pytest.fail(f"netveil binary not found at {b}: build it (cargo build --release -p netveil) or set NETVEIL_BIN")
