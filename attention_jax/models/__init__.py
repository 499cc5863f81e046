"""The models: alignment score functions (scores), attention modes and normalisers
(attention), multi-head attention (multihead), the source encoders (encoders: the registry;
rnn_encoder, images: CNN and ViT, self_attention), GRU / LSTM cells (cells), the RNN decoders
(rnn_decoder: Bahdanau, Luong), the Transformer (transformer), small shared layers (layers),
the model contract that decoding and attribution use (contract) and ModelConfig / build by
model.arch (model). They read token ids or pixels only: no module here imports the data
package, training or decoding."""
