pytest_plugins = ["tests.fixtures.sshd", "tests.fixtures.engines"]
