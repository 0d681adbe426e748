"""The PyTorch reference engine: exact speculative decoding over Hugging Face causal LMs."""
