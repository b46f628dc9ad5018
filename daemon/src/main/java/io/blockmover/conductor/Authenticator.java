package io.blockmover.conductor;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Base64;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The HMAC challenge both peers answer before anything else is accepted. Each side sends a fresh nonce; the
 * server proves the key with HMAC-SHA256(key, "server" | client nonce | server nonce | client | server), the client
 * with the same over "client". Neither proof can be replayed, since each covers the other side's fresh nonce.
 */
final class Authenticator
{
    static final int NONCE_LENGTH = 32;
    private static final SecureRandom RANDOM = new SecureRandom();

    private Authenticator()
    {
    }

    static String newNonce()
    {
        final byte[] nonce = new byte[NONCE_LENGTH];
        RANDOM.nextBytes(nonce);
        return Base64.getEncoder().encodeToString(nonce);
    }

    static String proof(final byte[] key, final String role, final String clientNonce, final String serverNonce,
        final String clientName, final String serverName)
    {
        try
        {
            final Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            final String text = role + "|" + clientNonce + "|" + serverNonce + "|" + clientName + "|" + serverName;
            return Base64.getEncoder().encodeToString(mac.doFinal(text.getBytes(StandardCharsets.UTF_8)));
        }
        catch (final GeneralSecurityException ex)
        {
            throw new IllegalStateException("HmacSHA256 unavailable", ex);
        }
    }

    /**
     * Compares in constant time, so timing tells an attacker nothing.
     */
    static boolean matches(final String expected, final Object actual)
    {
        return actual instanceof String && MessageDigest.isEqual(
            expected.getBytes(StandardCharsets.UTF_8), ((String)actual).getBytes(StandardCharsets.UTF_8));
    }
}
