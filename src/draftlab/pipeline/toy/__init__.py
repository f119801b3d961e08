"""The toy world's recipe room: what is measured of the world itself before the freeze (`properties`)."""
