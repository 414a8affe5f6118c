"""The teacher: any causal LM loaded through transformers (load), its cached distributions (cache), and the
scaled-down stand-in of a real teacher's shape (standin). Imports parallel/, nn/, data/ and below."""
