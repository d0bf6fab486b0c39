"""Where a chain starts: every decision about a chain's start (a start the user gave, the
start search, fitted starts) lives in this package."""
