"""Process management apart from HTTP: daemonizing, pid files, the pre-fork master and its workers, gevent's order."""
