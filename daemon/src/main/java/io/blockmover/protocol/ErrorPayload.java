package io.blockmover.protocol;

import java.nio.charset.StandardCharsets;

import io.blockmover.ErrorCode;

/**
 * Payload of an ERROR frame: the error code's name, a newline, and the message, in UTF-8. Names, not ordinals,
 * travel, so peers of different versions still understand each other. Error paths only: allocates.
 */
public final class ErrorPayload
{
    private ErrorPayload()
    {
    }

    public static byte[] encode(final ErrorCode code, final String message)
    {
        return (code.name() + "\n" + message).getBytes(StandardCharsets.UTF_8);
    }

    public static ErrorCode code(final byte[] payload)
    {
        final String text = new String(payload, StandardCharsets.UTF_8);
        final int newline = text.indexOf('\n');
        return ErrorCode.parse(newline < 0 ? text : text.substring(0, newline));
    }

    public static String message(final byte[] payload)
    {
        final String text = new String(payload, StandardCharsets.UTF_8);
        final int newline = text.indexOf('\n');
        return newline < 0 ? "" : text.substring(newline + 1);
    }
}
