"""Stream processing: Faust workers that join node records into attribution events and alerts."""
