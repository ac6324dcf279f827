"""Alert delivery: the alerts topic to Slack and webhooks, with retries and a dead-letter topic."""
