"""Pure data-preparation logic (no Ray): corpus reading, text, pairing, masking, storage."""
