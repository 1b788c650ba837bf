"""What the three sequence families (classification, regression, multi-label) share: not a family
of its own (its name starts with `_`), each family's folder subclasses its SequenceFamily."""
