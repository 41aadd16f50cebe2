"""HTTP routes: OpenAI-compatible inference and Lemonade-style management."""
