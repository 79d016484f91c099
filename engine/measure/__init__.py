"""See the modules of this package; each is one measure piece."""
