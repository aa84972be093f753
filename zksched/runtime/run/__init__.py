"""Running what a fire starts: a job's command (`CommandRunner`, its supervisor and reaper)
or an app's function (`FunctionRunner`), with deadlines and output logging; and what a
retried fire's runs leave in its record (`AttemptLog`, `attempts.py`)."""
