"""The retriever: find, grep, glob and tree reads over a replica of the vector index."""
