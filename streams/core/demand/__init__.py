"""What nodes supply and pending pods demand, and the alert when they wait while GPUs idle."""
