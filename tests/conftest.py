pytest_plugins = ["tests.fixtures.sshd"]
