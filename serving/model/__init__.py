"""The model a server serves: what its config says (`info`), the built-in one and dummy-weight
shapes (`local`), one named by its Hugging Face id (`hub`), and the memory arithmetic of its
weights and KV cache (`memory`). Used through `serving`'s facade.
"""
