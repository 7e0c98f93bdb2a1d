"""Worker processes: the runtime inside them and how they are started."""
