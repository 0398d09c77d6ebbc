"""Submit-time feature tables for prediction: request fields, script features, text embedding, history."""
