"""What a daemon tells the outside: health, readiness, metrics and the status page
(`DaemonStatus`), served over HTTP (`HttpEndpoint`, the public port in a child process)."""
