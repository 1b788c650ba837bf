"""Pure PyTorch pretraining pieces (no Ray): optimizer, schedule, batches, the step, FSDP2 wrapping."""
