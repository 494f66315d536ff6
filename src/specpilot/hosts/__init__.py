"""Places a server can run: this machine (`LocalHost`) or an SSH host (`SSHHost`)."""
