"""The node's GPU stack: operator intent against what runs, and its ``stack-broken`` alert."""
